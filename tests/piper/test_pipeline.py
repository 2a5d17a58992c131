"""PiperPipeline: per-sentence chunks, seeds, speed, overrides, and speech like piper-tts's."""
from __future__ import annotations

import numpy as np
import pytest

from ttscli.errors import UsageError
from ttscli.generate import Request
from ttscli.models.piper import PiperPipeline


@pytest.fixture(scope="module")
def pipe(model, id_map):
    return PiperPipeline(model, id_map)


def test_one_chunk_per_sentence(pipe):
    chunks = list(pipe.generate(Request(text="Hi there. How are you? Good!", seed=3)))
    assert len(chunks) == 3
    assert all(c.dtype == np.float32 and c.ndim == 1 and np.isfinite(c).all() for c in chunks)
    assert pipe.stats.extra["sentences"] == 3 and pipe.stats.first_audio_s is not None


def test_seed_is_reproducible(pipe):
    req = Request(text="Seeds make this repeatable.", seed=11)
    a, b = np.concatenate(list(pipe.generate(req))), np.concatenate(list(pipe.generate(req)))
    c = np.concatenate(list(pipe.generate(Request(text=req.text, seed=12))))
    assert np.array_equal(a, b)
    assert a.shape != c.shape or not np.allclose(a, c)


def test_speed_and_overrides(pipe):
    text = "Speed changes length."
    quiet = {"noise_w": 0.0, "noise_scale": 0.0}
    n1 = sum(map(len, pipe.generate(Request(text=text, knobs=quiet))))
    n2 = sum(map(len, pipe.generate(Request(text=text, speed=2.0, knobs=quiet))))
    n3 = sum(map(len, pipe.generate(Request(text=text, knobs={**quiet, "length_scale": 2.0}))))
    assert 0.45 < n2 / n1 < 0.7 and 1.6 < n3 / n1 < 2.2      # ceil() per phoneme rounds up
    with pytest.raises(UsageError):
        list(pipe.generate(Request(text=text, speed=0)))


def test_engine_refuses_what_piper_cannot_honour(pipe):
    """The engine checks requests against the family's declaration before the pipeline runs."""
    from ttscli import synthesize
    from ttscli.registry import load_registry

    pipe.spec = load_registry().resolve("piper-joe")
    try:
        for bad, match in [({"knobs": {"temperature": 0.7}}, "no setting --temperature"),
                           ({"knobs": {"noise_scale": -1}}, "noise-scale must be in"),
                           ({"instruct": "cheerful"}, "cannot honour --instruct"),
                           ({"language": "de"}, "does not speak --language"),
                           ({"voice": "ryan"}, "has no voice 'ryan'"),
                           ({"max_frames": 10}, "cannot honour --max-frames")]:
            with pytest.raises(UsageError, match=match):
                list(synthesize(pipe, Request(text="Hi.", **bad)))
        assert len(list(synthesize(pipe, Request(text="Hi.", voice="joe", language="en-US",
                                                 knobs={"noise_scale": "0.5"})))) >= 1
    finally:
        pipe.spec = None


def test_text_without_speech_is_not_an_error(pipe):
    assert list(pipe.generate(Request(text="...", seed=1))) == []
    assert len(list(pipe.generate(Request(text="😀 中文", seed=1)))) == 1


def _envelope(x, hop=256):
    n = len(x) // hop
    return np.sqrt((x[: n * hop].reshape(n, hop) ** 2).mean(1))


def test_fox_sounds_like_piper_tts(pipe, voice_dir):
    """End to end against piper-tts's own synthesize() at noise 0 (its normalisation included)."""
    piper = pytest.importorskip("piper")
    text = "The quick brown fox jumps over the lazy dog."
    voice = piper.PiperVoice.load(voice_dir / "en_US-joe-medium.onnx")
    ref = np.concatenate([c.audio_float_array for c in voice.synthesize(
        text, piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0))])
    ours = np.concatenate(list(pipe.generate(Request(text=text, knobs={"noise_scale": 0.0, "noise_w": 0.0}))))
    assert ours.shape == ref.shape
    env_o, env_r = _envelope(ours), _envelope(ref)
    assert np.corrcoef(env_o, env_r)[0, 1] > 0.999
    assert np.abs(ours - ref).max() < 1e-3
