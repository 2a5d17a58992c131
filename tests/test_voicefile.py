"""ttscli.voicefile: the saved-voice file every family writes and reads (atomic write, one-line refusals)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from ttscli import voicefile
from ttscli.errors import UsageError


def test_round_trip_and_permissions(tmp_path):
    p = voicefile.save(tmp_path / "sub" / "v.safetensors", {"a": np.arange(6, dtype=np.int32).reshape(2, 3)},
                       {"format": "fmt-x", "ref_text": "hi"})
    tensors, meta = voicefile.load(p, "fmt-x", "X")
    assert tensors["a"].tolist() == [[0, 1, 2], [3, 4, 5]] and meta["ref_text"] == "hi"
    umask = os.umask(0)
    os.umask(umask)
    assert (p.stat().st_mode & 0o777) == 0o666 & ~umask          # not mkstemp's 0600
    assert [f.name for f in p.parent.iterdir()] == ["v.safetensors"]   # no temp file left


def test_failed_save_leaves_nothing(tmp_path):
    target = tmp_path / "v.safetensors"
    target.write_bytes(b"previous voice")
    with pytest.raises(Exception):  # noqa: B017  (safetensors' own error for a non-array)
        voicefile.save(target, {"a": "not an array"}, {"format": "fmt-x"})
    assert target.read_bytes() == b"previous voice"
    assert [f.name for f in tmp_path.iterdir()] == ["v.safetensors"]


@pytest.mark.parametrize("make, msg", [
    (lambda p: None, "voice file not found"),
    (lambda p: p.write_bytes(b"\x00garbage"), "is not a readable voice file"),
])
def test_refusals(tmp_path, make, msg):
    p = tmp_path / "v.safetensors"
    make(p)
    with pytest.raises(UsageError, match=msg):
        voicefile.load(p, "fmt-x", "X")


def test_other_format_and_suffix(tmp_path):
    p = voicefile.save(tmp_path / "v.safetensors", {"a": np.zeros(1, np.float32)}, {"format": "fmt-y"})
    with pytest.raises(UsageError, match="is not a ttscli X voice file"):
        voicefile.load(p, "fmt-x", "X")
    with pytest.raises(UsageError, match="must end in .safetensors"):
        voicefile.save(tmp_path / "v.bin", {"a": np.zeros(1, np.float32)}, {"format": "fmt-x"})
    assert voicefile.is_voice_file("a.safetensors") and not voicefile.is_voice_file("Vivian")
    assert not voicefile.is_voice_file(None)
