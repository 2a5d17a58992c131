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


# ---- hostile sizes: refused before memory is allocated -----------------------------------------

def _fake_torch(monkeypatch):
    """Just enough of torch's names for pickle to write a tensor record as torch does."""
    import sys
    import types

    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    class FloatStorage:
        pass

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called: the file is only written here")

    FloatStorage.__module__, _rebuild_tensor_v2.__module__ = "torch", "torch._utils"
    FloatStorage.__qualname__, _rebuild_tensor_v2.__qualname__ = "FloatStorage", "_rebuild_tensor_v2"
    torch.FloatStorage, utils._rebuild_tensor_v2 = FloatStorage, _rebuild_tensor_v2
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return FloatStorage, _rebuild_tensor_v2


def _tensor_pickle(monkeypatch, size, stride, numel, legacy=False) -> bytes:
    """{"w": tensor} whose one float32 storage (key "0") the pickle says holds ``numel`` elements."""
    from collections import OrderedDict

    storage_type, rebuild = _fake_torch(monkeypatch)

    class Storage:
        pass

    class Tensor:
        def __reduce__(self):
            return rebuild, (Storage(), 0, size, stride, False, OrderedDict())

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Storage):
                return ("storage", storage_type, "0", "cpu", numel) + ((None,) if legacy else ())
            return None

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump({"w": Tensor()})
    return buf.getvalue()


def _load_under_a_memory_cap(path: Path):
    """torchfile.load(path) in a child process whose address space is capped at 4 GiB: an
    allocation the file's size does not justify fails there instead of swapping this machine."""
    import subprocess
    import sys

    code = ("import resource, sys\n"
            "from ttscli import torchfile\n"
            "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
            "try:\n"
            "    torchfile.load(sys.argv[1])\n"
            "except torchfile.TorchFileError as e:\n"
            "    print(e)\n"
            "    sys.exit(3)\n")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_zero_stride_tensor_cannot_ask_for_more_than_the_file_holds(tmp_path, monkeypatch):
    path = tmp_path / "zero-stride.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", _tensor_pickle(monkeypatch, (2**36,), (0,), 1))
        zf.writestr("archive/data/0", np.float32(1).tobytes())
    assert path.stat().st_size < 500          # a few hundred bytes asking for 256 GiB
    p = _load_under_a_memory_cap(path)
    assert p.returncode == 3, p.stderr[-2000:]
    assert f"{path}: a tensor of shape (68719476736,) would take 274,877,906,944 bytes" in p.stdout
    assert "at most 4x its" in p.stdout and "zero stride" in p.stdout


def test_a_legacy_storage_cannot_claim_more_bytes_than_are_left(tmp_path, monkeypatch):
    buf = io.BytesIO()
    for header in (torchfile.LEGACY_MAGIC, 1001, {"little_endian": True}):
        pickle.dump(header, buf, protocol=2)
    buf.write(_tensor_pickle(monkeypatch, (1,), (1,), 1, legacy=True))
    pickle.dump(["0"], buf, protocol=2)
    buf.write((2**40).to_bytes(8, "little") + np.float32(1).tobytes())   # "2^40 elements follow"
    path = tmp_path / "legacy-claim.pt"
    path.write_bytes(buf.getvalue())
    p = _load_under_a_memory_cap(path)
    assert p.returncode == 3, p.stderr[-2000:]
    assert "storage 0 claims 4,398,046,511,104 bytes; the file has 4 left" in p.stdout


def test_a_compressed_entry_cannot_inflate_past_the_file(tmp_path, monkeypatch):
    n = 4 << 20                                 # 16 MiB of zeros deflate to a few KiB
    path = tmp_path / "bomb.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", _tensor_pickle(monkeypatch, (n,), (1,), n))
        zf.writestr("archive/data/0", bytes(4 * n), compress_type=zipfile.ZIP_DEFLATED)
    with pytest.raises(TorchFileError, match=rf"storage 0 claims {4 * n:,} bytes, more than the file's"):
        torchfile.load(path)
