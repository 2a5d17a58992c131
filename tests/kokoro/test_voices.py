import numpy as np
import pytest

from ttscli.errors import CheckpointError, UsageError
from ttscli.models.kokoro.load import parse_voice, read_voices, style_row


def _voices():
    rng = np.random.default_rng(0)
    return {"a": rng.standard_normal((510, 256)).astype(np.float32),
            "b": rng.standard_normal((510, 256)).astype(np.float32)}


def test_blend_is_the_normalised_weighted_mean():
    v = _voices()
    pack, desc = parse_voice("a:0.7, b:0.3", v)
    np.testing.assert_allclose(pack, 0.7 * v["a"] + 0.3 * v["b"], rtol=1e-6, atol=1e-6)
    assert desc == "a:0.7,b:0.3"
    pack2, _ = parse_voice("a:7,b:3", v)
    np.testing.assert_allclose(pack2, pack, rtol=1e-6, atol=1e-6)
    assert parse_voice("b", v)[0] is not None and np.array_equal(parse_voice("b", v)[0], v["b"])


@pytest.mark.parametrize("spec, msg", [("c", "not a voice"), ("a:x", "must be a number"), ("a:0,b:0", "sum to 0"),
                                       ("a:-1", ">= 0"), ("a:nan", "finite")])
def test_bad_voices_are_one_line(spec, msg):
    with pytest.raises(UsageError, match=msg):
        parse_voice(spec, _voices())


def test_style_row_is_upstreams():
    v = _voices()["a"]
    assert np.array_equal(style_row(v, 1), v[0]) and np.array_equal(style_row(v, 40), v[39])
    assert np.array_equal(style_row(v, 900), v[509])


def test_voice_files(tmp_path):
    from safetensors.numpy import save_file

    v = _voices()
    np.savez(tmp_path / "pack.npz", **{k: x[:, None, :] for k, x in v.items()})
    got = read_voices(tmp_path / "pack.npz")
    assert set(got) == {"a", "b"} and np.array_equal(got["a"], v["a"])
    d = tmp_path / "voices"
    d.mkdir()
    save_file({"voice": v["b"][:, None, :]}, str(d / "af_test.safetensors"))
    assert np.array_equal(read_voices(d)["af_test"], v["b"])
    pack, desc = parse_voice(str(d / "af_test.safetensors"), v)
    assert desc == "af_test.safetensors" and np.array_equal(pack, v["b"])
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="not a readable voice file"):
        read_voices(tmp_path / "bad.npz")
    np.savez(tmp_path / "shape.npz", x=np.zeros((3, 100), np.float32))
    with pytest.raises(CheckpointError, match="expected"):
        read_voices(tmp_path / "shape.npz")


def test_real_voices(kokoro_voices):
    assert sorted(kokoro_voices) == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]
    assert all(v.shape == (510, 256) for v in kokoro_voices.values())


class _Payload:
    """Pickles as a call to os.system, as a hostile voice file would."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_pt_voice_with_code_in_its_pickle_is_refused_unrun(tmp_path):
    import pickle
    import zipfile

    marker = tmp_path / "pwned"
    with zipfile.ZipFile(tmp_path / "af_evil.pt", "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps(_Payload(marker), protocol=2))
        zf.writestr("archive/version", "3\n")
    with pytest.raises(CheckpointError, match="not a readable voice file.*refused"):
        read_voices(tmp_path / "af_evil.pt")
    assert not marker.exists()
