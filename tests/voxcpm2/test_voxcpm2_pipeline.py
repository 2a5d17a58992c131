"""The VoxCPM2 pipeline on the tiny checkpoint: streaming (first audio after one patch, streamed
equal to one-shot in every prompt mode), the request's modes and their refusals, saved voices."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from ttscli.errors import GenerationError, UsageError
from ttscli.models.base import Request

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "voxcpm2"
TEXT = "Hello world."


@pytest.fixture(scope="module")
def pipe():
    from ttscli import api

    return api.load("voxcpm2", model_dir=FIX / "tiny")


@pytest.fixture(scope="module")
def ref():
    """A reference short enough for the tiny model's 256-position context (16 kHz)."""
    return np.load(FIX / "goldens.npz")["ref_wav"].astype(np.float32)


def run(pipe, **fields) -> list[np.ndarray]:
    return list(pipe.generate(Request(text=TEXT, seed=3, max_frames=6, ignore_eos=True, **fields)))


@pytest.mark.parametrize("mode", ["plain", "design", "clone", "continuation"])
def test_streamed_audio_equals_one_shot_and_starts_after_one_patch(pipe, ref, mode):
    fields = {"design": dict(instruct="a warm low voice"),
              "clone": dict(ref_audio=ref, ref_sample_rate=16000),
              "continuation": dict(ref_audio=ref, ref_sample_rate=16000, ref_text="Speak softly.")}.get(mode, {})
    whole = run(pipe, **fields)
    chunks = run(pipe, stream=True, first_chunk_frames=1, chunk_frames=2, **fields)
    per_patch = pipe.args.patch_size * pipe.args.vae.decode_hop
    assert len(whole) == 1 and pipe.sample_rate == 48000
    assert [len(c) for c in chunks] == [per_patch, 2 * per_patch, 2 * per_patch, per_patch]
    joined = np.concatenate(chunks)
    assert joined.shape == whole[0].shape
    assert np.abs(joined - whole[0]).max() <= 1e-5 * max(np.abs(whole[0]).max(), 1e-6)


def test_modes_change_the_prompt(pipe, ref):
    plain = run(pipe)[0]
    design = run(pipe, instruct="a warm low voice")[0]
    clone = run(pipe, ref_audio=ref, ref_sample_rate=16000)[0]
    assert not np.array_equal(plain, design) and not np.array_equal(plain, clone)
    import soxr

    at_24k = soxr.resample(ref, 16000, 24000).astype(np.float32)     # a library caller's own rate
    assert run(pipe, ref_audio=at_24k, ref_sample_rate=24000)[0].shape == clone.shape
    text = pipe.request_text(Request(text="Hi\n  there.", instruct=" calm  voice"), None)
    assert text == "(calm voice)Hi there."


def test_refusals_are_one_line(pipe, ref):
    with pytest.raises(UsageError, match="--instruct cannot go with a continuation prompt"):
        run(pipe, ref_audio=ref, ref_sample_rate=16000, ref_text="Speak softly.", instruct="calm")
    with pytest.raises(UsageError, match="--no-ref-prefix leaves a continuation prompt only: give --ref-text"):
        run(pipe, ref_audio=ref, ref_sample_rate=16000, knobs={"ref_prefix": False})
    with pytest.raises(UsageError, match="exceed VoxCPM2's 256-position context"):
        run(pipe, ref_audio=np.zeros(16000, np.float32), ref_sample_rate=16000)
    with pytest.raises(UsageError, match="no preset voice 'ryan': --voice takes a file saved with"):
        run(pipe, voice="ryan")
    with pytest.raises(GenerationError, match="reached 2 patches without its stop"):
        list(pipe.generate(Request(text=TEXT, seed=3, max_frames=2)))


def test_min_len_holds_off_the_stop(pipe):
    """The tiny model's stop head ends this text within a few patches; past min_len only, so a
    min_len at the limit runs to the limit, which is an error."""
    stopped = list(pipe.generate(Request(text=TEXT, seed=3, max_frames=20)))
    per_patch = pipe.args.patch_size * pipe.args.vae.decode_hop
    n = sum(len(c) for c in stopped) // per_patch
    assert 3 < n < 20
    longer = list(pipe.generate(Request(text=TEXT, seed=3, max_frames=20, knobs={"min_len": n})))
    assert sum(len(c) for c in longer) // per_patch > n
    with pytest.raises(GenerationError, match="reached 20 patches without its stop"):
        list(pipe.generate(Request(text=TEXT, seed=3, max_frames=20, knobs={"min_len": 20})))


def test_saved_voice_speaks_as_the_clone(pipe, ref, tmp_path):
    path = tmp_path / "me.safetensors"
    fields = dict(ref_audio=ref, ref_sample_rate=16000, ref_text="Speak softly.")
    cloned = run(pipe, save_voice=path, **fields)[0]
    again = run(pipe, voice=str(path))[0]
    assert np.array_equal(cloned, again)
    (tmp_path / "bad.safetensors").write_bytes(b"not a voice")
    with pytest.raises(UsageError, match="not a readable voice file"):
        run(pipe, voice=str(tmp_path / "bad.safetensors"))


def test_bench_peer_refuses_before_running_upstream(monkeypatch):
    from ttscli.models.voxcpm2 import bench

    monkeypatch.delenv(bench.PEER_PYTHON, raising=False)
    with pytest.raises(UsageError, match="set TTSCLI_VOXCPM_PYTHON"):
        bench.bench_peer(None, None, TEXT, 1)
    monkeypatch.setenv(bench.PEER_PYTHON, "/nonexistent/python")
    monkeypatch.setenv(bench.PEER_PATCHES, "many")
    with pytest.raises(UsageError, match="TTSCLI_VOXCPM_PEER_PATCHES must be a whole number"):
        bench.bench_peer(None, None, TEXT, 1)


def test_flow_estimator_backend_choice():
    """The LocDiT runs where --backend flow_estimator says (onnx by default on a Linux CPU with
    onnxruntime); on onnx a bfloat16 model is refused with one line, before any generation."""
    pytest.importorskip("onnxruntime")
    import sys

    from ttscli import api
    from ttscli.models.base import LoadOptions

    default = api.load("voxcpm2", model_dir=FIX / "tiny")
    assert default.backends["flow_estimator"] == ("onnx-float32" if sys.platform.startswith("linux") else "mlx")
    on_mlx = api.load("voxcpm2", model_dir=FIX / "tiny", options=LoadOptions(backends={"flow_estimator": "mlx"}))
    assert on_mlx.backends["flow_estimator"] == "mlx" and on_mlx.model.feat_decoder.external_estimator is None
    with pytest.raises(UsageError, match="computes in float32, not bfloat16"):
        api.load("voxcpm2", model_dir=FIX / "tiny",
                 options=LoadOptions(dtype="bfloat16", backends={"flow_estimator": "onnx"}))
    assert default.backends["lm"] == "mlx" and default.rows() is not None
    assert default.backends["patch_encoder"] == ("onnx" if sys.platform.startswith("linux") else "mlx")
    plain = api.load("voxcpm2", model_dir=FIX / "tiny", options=LoadOptions(backends={"flow_estimator": "onnx"}))
    assert plain.backends["flow_estimator"] == "onnx-float32"        # a flow's plain "onnx" is float32
    int8 = api.load("voxcpm2", model_dir=FIX / "tiny", options=LoadOptions(backends={"flow_estimator": "onnx-int8"}))
    assert int8.backends["flow_estimator"] == "onnx-int8"
    on_onnx = api.load("voxcpm2", model_dir=FIX / "tiny", options=LoadOptions(backends={"lm": "onnx-f32"}))
    assert on_onnx.backends["lm"] == "onnx-float32" and on_onnx.rows() is None
    with pytest.raises(UsageError, match="compute in float32"):
        api.load("voxcpm2", model_dir=FIX / "tiny", options=LoadOptions(dtype="bfloat16", backends={"lm": "onnx"}))
