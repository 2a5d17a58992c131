"""Breeze pipeline plumbing on the tiny published-layout checkpoint: every mode speaks, streaming
equals one-shot, CFG and limits are errors where they must be, clone from audio and saved voices.
(The numbers of each stage are held to upstream in test_breeze_model.py.)"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ttscli.errors import GenerationError, InputTooLongError, UsageError
from ttscli.generate import Request
from ttscli.models.base import LoadOptions

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "breeze" / "tiny"
TEXT = "Hello the world (laugh) 你好[笑]!"


class Spec:
    id, sample_rate, defaults = "breeze-tts-2", 24000, {}


@pytest.fixture(scope="module")
def pipe():
    from ttscli.models.breeze_tts.load import load_pipeline

    return load_pipeline(Spec(), TINY, LoadOptions())


def run(p, **kw) -> np.ndarray:
    kw.setdefault("seed", 0)
    r = Request(text=kw.pop("text", TEXT), **kw)
    p.reset_stats()
    chunks = list(p.generate(r))
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    return np.concatenate(chunks)


def ref_audio(seconds=0.5) -> np.ndarray:
    t = np.arange(int(24000 * seconds)) / 24000
    return (0.3 * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)


def test_every_mode_speaks(pipe):
    wav = ref_audio()
    for kw in ({}, {"instruct": "calm"}, {"instruct": "calm", "knobs": {"cfg_scale": 3.0}},
               {"ref_audio": wav, "ref_sample_rate": 24000, "ref_text": "Today is a good day."},
               {"ref_audio": wav, "ref_sample_rate": 24000, "ref_text": "Today.", "instruct": "whisper",
                "knobs": {"cfg_scale": 2.0}}):
        audio = run(pipe, max_frames=5, ignore_eos=True, **kw)
        assert audio.shape == (5 * 1920,) and np.isfinite(audio).all()
        assert pipe.stats.frames == 5


def test_streaming_equals_one_shot(pipe):
    one = run(pipe, max_frames=7, ignore_eos=True, instruct="calm", knobs={"cfg_scale": 2.5})
    streamed = run(pipe, max_frames=7, ignore_eos=True, instruct="calm", knobs={"cfg_scale": 2.5},
                   stream=True, first_chunk_frames=1, chunk_frames=2)
    assert pipe.stats.first_audio_s is not None
    np.testing.assert_allclose(streamed, one, atol=1e-4)   # float32 rounding of other chunk sizes


def test_cfg_without_instruction_is_refused(pipe):
    with pytest.raises(UsageError, match="needs an instruction"):
        run(pipe, knobs={"cfg_scale": 2.0})
    with pytest.raises(UsageError, match="needs an instruction"):
        run(pipe, ref_audio=ref_audio(), ref_sample_rate=24000, ref_text="Today.", knobs={"cfg_scale": 4.0})


def test_max_frames_and_context_are_errors(pipe):
    with pytest.raises(GenerationError, match="max-frames 2"):
        run(pipe, max_frames=2, knobs={"do_sample": False})
    with pytest.raises(InputTooLongError, match="context"):
        run(pipe, max_frames=pipe.args.max_positions)


def test_greedy_stops_on_the_eos_class(pipe):
    audio = run(pipe, max_frames=40, knobs={"do_sample": False})
    assert 0 < pipe.stats.frames < 40 and audio.shape == (pipe.stats.frames * 1920,)


def test_clone_needs_transcript_and_saved_voice_replays(pipe, tmp_path):
    with pytest.raises(UsageError, match="--ref-text"):
        run(pipe, ref_audio=ref_audio(), ref_sample_rate=24000)
    f = tmp_path / "v.safetensors"
    a = run(pipe, max_frames=4, ignore_eos=True, ref_audio=ref_audio(), ref_sample_rate=24000, ref_text="Today.",
            save_voice=f)
    assert f.exists()
    b = run(pipe, max_frames=4, ignore_eos=True, voice=str(f))
    np.testing.assert_array_equal(a, b)
    with pytest.raises(UsageError, match="no preset voice"):
        run(pipe, voice="ryan")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"nope")
    with pytest.raises(UsageError, match="not a readable voice file"):
        run(pipe, voice=str(bad))


def test_reference_codes_are_one_frame_per_1920_samples(pipe):
    v = pipe.voice(Request(text="x", ref_audio=ref_audio(0.3), ref_sample_rate=24000, ref_text="Today."))
    assert v.codes.shape == (int(np.ceil(0.3 * 24000 / 1920)), 16)
    assert v.codes.min() >= 0 and v.codes.max() < 2048


def test_convert_mlx_bf16_and_quantized(tmp_path):
    import mlx.core as mx

    from ttscli.models.breeze_tts.convert import convert_mlx
    from ttscli.models.breeze_tts.load import load_model, load_tokenizer
    from ttscli.models.breeze_tts.prompt import prompts

    ref, _ = load_model(TINY)
    tok = load_tokenizer(TINY, ref.args)
    cond, _, _ = prompts(ref, tok, TEXT, "calm", None, 1.0)
    want, _ = ref(cond.embeds, ref.new_cache())
    for q, floor in ((False, 0.99999), (True, 0.99)):
        out = tmp_path / f"q{int(q)}"
        convert_mlx(Spec(), TINY, out, quantize=q, q_bits=8, q_group_size=32, dtype=None)
        m, _ = load_model(out)
        assert ("scales" in m.backbone_model.layers[0].mlp.gate_proj) == q
        assert m.lm_head.weight.dtype == mx.float32 and "scales" not in m.audio_table
        got, _ = m(cond.embeds, m.new_cache())
        a, b = np.array(got[0], np.float64), np.array(want[0], np.float64)
        assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) >= floor
