"""ttscli.torchfile: tensors from torch files saved by torch itself; anything else refused unrun."""
import io
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ttscli import torchfile
from ttscli.torchfile import TorchFileError

FIX = Path(__file__).parent / "fixtures" / "eval"


@pytest.mark.parametrize("form", ["zip", "legacy"])
def test_reads_what_torch_saved(form):
    # saved by torch 2.13 (make_goldens.py): parameters, views, offsets, half, bfloat16, ints, bools
    expected = np.load(FIX / "tensors_expected.npz")
    obj = torchfile.load(FIX / f"tensors_{form}.pt")
    assert obj["step"] == 7 and obj["names"] == ["a", "b"]
    t, num = obj["nested"]["t"]
    assert num == 2.5 and np.array_equal(t, np.ones(2, np.float32))
    sd = obj["model_state"]
    assert list(sd) == list(expected.files)
    for name in expected.files:
        assert sd[name].shape == expected[name].shape, name
        assert sd[name].dtype == expected[name].dtype, name
        assert np.array_equal(sd[name], expected[name]), name
    assert sd["transposed"].flags.c_contiguous


def test_state_dict_under_a_key():
    sd = torchfile.state_dict(FIX / "tensors_zip.pt", "model_state")
    assert sd["ids"].tolist() == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    with pytest.raises(TorchFileError, match="no 'missing' entry"):
        torchfile.state_dict(FIX / "tensors_zip.pt", "missing")


class _Payload:
    """Pickles as a call to os.system: what a hostile checkpoint would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _zip_torch_file(path: Path, payload) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"w": payload}, protocol=2))
        zf.writestr("archive/version", "3\n")
    return path


def _legacy_torch_file(path: Path, payload) -> Path:
    buf = io.BytesIO()
    for header in (torchfile.LEGACY_MAGIC, 1001, {"little_endian": True}):
        pickle.dump(header, buf, protocol=2)
    pickle.dump({"w": payload}, buf, protocol=2)
    pickle.dump([], buf, protocol=2)
    path.write_bytes(buf.getvalue())
    return path


@pytest.mark.parametrize("make", [_zip_torch_file, _legacy_torch_file])
def test_code_in_the_pickle_is_refused_unrun(tmp_path, make):
    marker = tmp_path / "pwned"
    # the same pickle through plain pickle really runs the payload: the test would see it
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.exists()
    marker.unlink()
    bad = make(tmp_path / "evil.pt", _Payload(marker))
    with pytest.raises(TorchFileError, match=r"refused: the pickle names (posix|os|nt)\.system"):
        torchfile.load(bad)
    assert not marker.exists()


def test_torch_names_outside_the_tensor_set_are_refused(tmp_path):
    # a GLOBAL under torch's own namespace is no safer than any other
    raw = b"\x80\x02ctorch\nload\nq\x00."
    path = tmp_path / "x.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", raw)
    with pytest.raises(TorchFileError, match="torch.load"):
        torchfile.load(path)


def test_damaged_files_are_one_clear_error(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint at all")
    with pytest.raises(TorchFileError, match="junk.pt"):
        torchfile.load(junk)
    cut = tmp_path / "cut.pt"
    cut.write_bytes((FIX / "tensors_legacy.pt").read_bytes()[:-40])
    with pytest.raises(TorchFileError, match="ends inside its storages"):
        torchfile.load(cut)
    with pytest.raises(TorchFileError, match="cannot read"):
        torchfile.load(tmp_path / "absent.pt")
