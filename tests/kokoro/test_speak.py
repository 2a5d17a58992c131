"""`ttscli speak -m kokoro` end to end on the real weights, with Whisper (ttscli.eval's ASR) listening."""
import numpy as np
import pytest
import soundfile as sf
from clitools import only_line


@pytest.fixture(scope="module")
def asr():
    pytest.importorskip("faster_whisper")
    from ttscli.eval.asr import ASR

    return ASR()


def _heard(asr, path, lang):
    import soxr

    a, sr = sf.read(str(path), dtype="float32")
    return asr.transcribe(soxr.resample(a, sr, 16000), lang)


def _norm(t):
    return "".join(ch for ch in t.lower() if ch.isalnum() or ch == " ").split()


@pytest.mark.parametrize("text, args, lang", [
    ("The quick brown fox jumps over the lazy dog.", [], "en"),
    pytest.param("Hello, my name is Sarah, and I will read the news today.", ["--voice", "jf_alpha:0.7,jf_nezumi:0.3"],
                 "en", marks=pytest.mark.slow),
    ("こんにちは、今日はいい天気ですね。", ["--voice", "jf_alpha"], "ja"),
])
def test_speech_is_heard(run_cli, kokoro_model, asr, tmp_path, text, args, lang):
    out = tmp_path / "k.wav"
    p = run_cli("speak", text, "-m", "kokoro", "-o", out, *args)
    assert p.returncode == 0, p.err
    a, sr = sf.read(str(out), dtype="float32")
    assert sr == 24000 and 1.5 < a.size / sr < 8 and 0.05 < np.abs(a).max() <= 1.0
    heard = _heard(asr, out, lang)
    if lang == "ja":
        assert heard.strip("。 ") == text.strip("。 "), heard
    else:
        assert _norm(heard) == _norm(text), heard


@pytest.mark.slow
def test_speed_stream_and_sentences(run_cli, kokoro_model, tmp_path):
    text = "One two three. Four five six."
    base, fast = tmp_path / "a.wav", tmp_path / "b.wav"
    assert run_cli("speak", text, "-m", "kokoro", "-o", base).returncode == 0
    p = run_cli("speak", text, "-m", "kokoro", "--speed", "1.5", "--stream", "-o", fast)
    assert p.returncode == 0, p.err
    a, b = sf.read(str(base))[0], sf.read(str(fast))[0]
    assert 0.55 < b.size / a.size < 0.8


@pytest.mark.parametrize("args, msg", [
    (["--language", "fr"], "does not speak"),
    (["--voice", "af_nobody"], "no voice"),
    (["--voice", "jf_alpha:x"], "must be a number"),
    (["--speed", "9"], "speed"),
])
def test_bad_requests_are_one_line(run_cli, kokoro_model, tmp_path, args, msg):
    p = run_cli("speak", "Hello.", "-m", "kokoro", "-o", tmp_path / "x.wav", *args)
    assert p.returncode != 0
    assert msg in only_line(p.err)
    assert not (tmp_path / "x.wav").exists()
