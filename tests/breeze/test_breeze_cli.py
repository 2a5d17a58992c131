"""`ttscli speak -m breeze-tts-2` through the installed CLI on the tiny published-layout checkpoint."""
from __future__ import annotations

from pathlib import Path

import soundfile as sf

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "breeze" / "tiny"
TEXT = "Hello the world (laugh) 你好[笑]!"


def errors(err: str) -> list[str]:
    """stderr lines other than the non-commercial notice (printed on every load)."""
    assert "Traceback" not in err
    text = err.split("them.", 1)[-1] if "non-commercial" in err else err
    return [ln for ln in text.strip().splitlines() if ln.strip()]


def test_speak_and_its_errors(run_cli, tmp_path):
    p = run_cli("speak", "-m", "breeze-tts-2", "--model-dir", TINY, "--max-frames", "40", "--no-do-sample",
                TEXT, "-o", "a.wav")
    assert p.returncode == 0, p.err
    assert "non-commercial" in p.err
    audio, rate = sf.read(tmp_path / "a.wav")
    assert rate == 24000 and audio.ndim == 1 and len(audio) % 1920 == 0 and len(audio) > 0
    # CFG without an instruction: upstream raises; one line, non-zero, no file
    p = run_cli("speak", "-m", "breeze-tts-2", "--model-dir", TINY, "--cfg-scale", "3", TEXT, "-o", "b.wav")
    assert p.returncode != 0 and not (tmp_path / "b.wav").exists()
    assert errors(p.err) == [errors(p.err)[0]] and "needs an instruction" in errors(p.err)[0]
    # the frame limit reached is an error, never a cut-off file
    p = run_cli("speak", "-m", "breeze-tts-2", "--model-dir", TINY, "--max-frames", "2", "--no-do-sample", TEXT,
                "-o", "c.wav")
    assert p.returncode != 0 and not (tmp_path / "c.wav").exists()
    assert len(errors(p.err)) == 1 and "max-frames" in errors(p.err)[0]
