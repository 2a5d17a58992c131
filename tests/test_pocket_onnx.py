"""Pocket TTS's flow LM on onnxruntime (--backend flow_lm=onnx-*) on the tiny checkpoint: the
float32 graph against upstream's goldens (frames with its recorded noise, EOS, waveform) and
against MLX (a clone's state, then the same seeded generation); int8 / int4 against MLX within
parity's stated thresholds; the backend's declaration."""
from __future__ import annotations

from pathlib import Path

import ttscli  # noqa: F401  (BLAS preload before mlx)
import numpy as np
import pytest

from ttscli.errors import UsageError
from ttscli.models import get_family
from ttscli.models.base import LoadOptions, Request, cosine
from ttscli.registry import load_registry

pytest.importorskip("mlx.core")
pytest.importorskip("onnxruntime")

FIX = Path(__file__).resolve().parent / "fixtures" / "pocket_tts"
TINY = FIX / "tiny"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One converted-graph cache for the module (each precision builds once)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TTSCLI_CACHE", str(tmp_path_factory.mktemp("ttscli-cache")))
    yield
    mp.undo()


def load(backend: str = "mlx"):
    spec = load_registry().resolve("pocket-tts")
    return get_family("pocket_tts").load(spec, TINY, LoadOptions(backends={"flow_lm": backend}))


def test_onnx_f32_frames_and_waveform_match_upstream(cache):
    from ttscli.models.pocket_tts.parity import replay

    golden = dict(np.load(FIX / "goldens.npz"))
    pipe = load("onnx-f32")
    assert pipe.backends["flow_lm"] == "onnx-float32"
    audio, hidden, eos = replay(pipe, golden)
    assert len(hidden) == len(golden["step_hidden"])           # upstream's EOS stop, at the same frame
    assert min(cosine(a, b) for a, b in zip(hidden, golden["step_hidden"])) >= 0.99999
    assert [e > -4.0 for e in eos] == [bool(e > -4.0) for e in golden["eos_logits"]]
    wav, ref = np.concatenate(audio), golden["audio"]
    assert wav.shape == ref.shape
    assert np.abs(wav - ref).max() <= 1e-4 * np.abs(ref).max()


def test_onnx_f32_clone_and_seeded_generation_equal_mlx(cache, tmp_path):
    golden = dict(np.load(FIX / "goldens.npz"))
    out = {}
    for backend in ("mlx", "onnx-f32"):
        pipe = load(backend)
        saved = tmp_path / f"{backend}.safetensors"
        r = Request(text="hello world, how are you today", ref_audio=golden["ref_audio"], ref_sample_rate=24000,
                    save_voice=str(saved), seed=7)
        out[backend] = (np.concatenate(list(pipe.generate(r))), saved)
    (ref, ref_voice), (got, got_voice) = out["mlx"], out["onnx-f32"]
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    # the voice state read back from the graph's buffers is MLX's, in upstream's layout
    from ttscli.checkpoint import read_safetensors

    a, b = read_safetensors(ref_voice), read_safetensors(got_voice)
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_allclose(np.array(b[k]), np.array(a[k]), atol=1e-4)


def test_against_onnx_all_precisions_within_stated_thresholds(cache):
    from ttscli.models.pocket_tts.parity import parity_checks

    spec = load_registry().resolve("pocket-tts")
    checks = parity_checks(spec, TINY, against="onnx", frames=12)
    assert len(checks) == 12
    failed = [(c.name, c.value, c.threshold) for c in checks if not c.passed]
    assert not failed
    assert all(c.value == 12 for c in checks if c.name == "EOS decisions mlx vs onnx-float32")


def test_flow_lm_backends_are_declared_and_checked(monkeypatch):
    from ttscli.backends import select

    spec = load_registry().resolve("pocket-tts")
    family = get_family("pocket_tts")
    resolve = select.resolve
    assert resolve(spec, family, {"flow_lm": "onnx-int4"})["flow_lm"].backend == "onnx-int4"
    # the measured default: onnx (int8) on the CPU measured, MLX elsewhere and on a GPU
    for where, gpu, expect in ((("linux", "AuthenticAMD"), False, "onnx"), (("linux", "GenuineIntel"), False, "mlx"),
                               (("darwin", ""), False, "mlx"), (("linux", "AuthenticAMD"), True, "mlx")):
        monkeypatch.setattr(select, "this_machine", lambda where=where: where)
        monkeypatch.setattr(select, "mlx_on_gpu", lambda gpu=gpu: gpu)
        assert resolve(spec, family)["flow_lm"].backend == expect, where
    with pytest.raises(UsageError, match="speech_decoder runs on mlx"):
        resolve(spec, family, {"speech_decoder": "onnx"})
    with pytest.raises(UsageError, match="precision must be f32, int8 or int4"):
        resolve(spec, family, {"flow_lm": "onnx-int2"})


def test_onnx_f32_with_more_flow_steps_equals_mlx(cache):
    """More LSD steps than the graph's one: the graph's hidden, the flow head on MLX."""
    r = dict(text="hello world", seed=5, max_frames=6, ignore_eos=True, knobs={"sampler_decode_steps": 3})
    ref, got = (np.concatenate(list(load(b).generate(Request(**r)))) for b in ("mlx", "onnx-f32"))
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
