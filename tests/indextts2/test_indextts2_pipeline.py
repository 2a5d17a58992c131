"""IndexTTS2 end to end on the tiny folder in the published layout (tests/fixtures/indextts2/tiny):
every emotion mode, saved voices, segments and streaming, forced lengths, limits and refusals.
The modules' numbers are checked against upstream in the other tests of this folder."""
from pathlib import Path

import numpy as np
import pytest

from ttscli.errors import LimitReached, UsageError
from ttscli.generate import synthesize
from ttscli.models.base import Request

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
REF = np.load(FIX / "frontend.npz")["ref22"]
TEXT = "Hello there, this is a short sentence for the tokenizer."


@pytest.fixture(scope="module")
def pipe():
    from ttscli.api import load

    return load("indextts2", model_dir=FIX / "tiny")


def speak(pipe, text=TEXT, **kw):
    kw.setdefault("seed", 0)
    knobs = kw.pop("knobs", {})
    req = Request(text=text, ref_audio=kw.pop("ref_audio", REF), ref_sample_rate=22050, knobs=knobs, **kw)
    return np.concatenate(list(synthesize(pipe, req)))


def test_clone_is_seeded_and_emotion_modes_change_the_audio(pipe, tmp_path):
    a = speak(pipe, knobs={"tokens": 10})
    assert a.dtype == np.float32 and np.isfinite(a).all() and np.abs(a).max() > 0
    assert np.array_equal(a, speak(pipe, knobs={"tokens": 10}))
    import soundfile as sf

    sf.write(tmp_path / "emo.wav", REF[::-1].copy(), 22050)
    others = [speak(pipe, knobs={"tokens": 10, "emotion": "angry=0.9"}),
              speak(pipe, knobs={"tokens": 10, "emotion_ref": str(tmp_path / "emo.wav"), "emotion_alpha": 0.6}),
              speak(pipe, instruct="今天真是太开心了！", knobs={"tokens": 10})]
    for o in others:
        assert o.shape == a.shape and not np.allclose(o, a)


def test_emotion_alpha_zero_is_the_speakers_own(pipe, tmp_path):
    import soundfile as sf

    sf.write(tmp_path / "emo.wav", REF[::-1].copy(), 22050)
    plain = speak(pipe, knobs={"tokens": 10})
    assert np.array_equal(plain, speak(pipe, knobs={"tokens": 10, "emotion_ref": str(tmp_path / "emo.wav"),
                                                     "emotion_alpha": 0.0}))
    assert np.array_equal(plain, speak(pipe, knobs={"tokens": 10, "emotion": "happy=1", "emotion_alpha": 0.0}))


def test_saved_voice_speaks_as_the_reference(pipe, tmp_path):
    path = tmp_path / "v.safetensors"
    a = speak(pipe, knobs={"tokens": 10}, save_voice=path)
    b = np.concatenate(list(synthesize(pipe, Request(text=TEXT, voice=str(path), seed=0, knobs={"tokens": 10}))))
    assert np.array_equal(a, b)


def test_forced_length(pipe):
    from ttscli.models.indextts2.s2mel import code_frames

    for n in (7, 16):
        assert len(speak(pipe, knobs={"tokens": n})) == code_frames(n) * 256
    per_s = 22050 / 256 / 1.72
    assert len(speak(pipe, knobs={"duration": 0.3})) == code_frames(round(0.3 * per_s)) * 256
    with pytest.raises(UsageError, match="one segment"):
        speak(pipe, text=" ".join([TEXT] * 12), knobs={"tokens": 10})
    with pytest.raises(UsageError, match="not both"):
        speak(pipe, knobs={"tokens": 10, "duration": 1.0})


def test_segments_are_joined_with_upstreams_silence_and_stream_as_made(pipe):
    from ttscli.models.indextts2.text import split_segments

    text = TEXT + " Where is the money? It is a good day, and the cat sleeps."
    n_segs = len(split_segments(pipe.tokenizer.pieces(text), 12))
    assert n_segs > 1
    req = Request(text=text, ref_audio=REF, ref_sample_rate=22050, seed=3, max_frames=12, ignore_eos=True,
                  knobs={"segment_tokens": 12})
    pieces = list(pipe.generate(req))
    silences = [p for p in pieces if not p.any()]
    assert len(pieces) == 2 * n_segs - 1 and len(silences) == n_segs - 1
    assert all(len(s) == round(0.2 * 22050) for s in silences)
    one = np.concatenate(pieces)
    req.stream = True
    assert np.array_equal(np.concatenate(list(pipe.generate(req))), one)


def test_limit_reached_is_an_error(pipe):
    with pytest.raises(LimitReached, match="limit of 2 codes in a segment"):
        speak(pipe, max_frames=2, knobs={"num_beams": 1, "do_sample": False, "repetition_penalty": 1.0,
                                          "emotion": "happy=1.2"})


@pytest.mark.parametrize("knobs,instruct,words", [
    ({"emotion": "happy=0.5", "emotion_ref": "x.wav"}, None, "one emotion source"),
    ({"emotion": "happy=0.5"}, "calm down", "one emotion source"),
    ({"emotion": "joy=1"}, None, "unknown emotion"),
    ({"emotion_ref": "/no/such.wav"}, None, "does not exist"),
])
def test_refusals(pipe, knobs, instruct, words):
    with pytest.raises(Exception, match=words):
        speak(pipe, instruct=instruct, knobs=knobs)


def test_no_voice_is_refused(pipe):
    with pytest.raises(UsageError, match="cloned voice"):
        list(synthesize(pipe, Request(text=TEXT)))
