"""`ttscli speak|clone -m cosyvoice3` on the tiny checkpoint, as a user runs it: the three modes,
a saved voice, and the errors (one line, non-zero exit, no partial file)."""
from pathlib import Path

import numpy as np
import soundfile as sf
from clitools import no_files, only_line

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3" / "tiny"


def test_speak_and_clone_modes(run_cli, tmp_path):
    t = np.arange(24000) / 24000
    sf.write(str(tmp_path / "me.wav"), (0.2 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), 24000)
    common = ["--model-dir", TINY, "--max-frames", "200", "--seed", "0"]   # the tiny LM stops under sampling
    p = run_cli("speak", "-m", "cosyvoice3", "Hello there.", *common, "-o", "a.wav")
    assert p.returncode == 0, p.err
    p = run_cli("clone", "-m", "cosyvoice3", "Hello there.", "--ref", "me.wav", "--ref-text", "What I said.",
                "--save-voice", "me.safetensors", *common, "-o", "b.wav")
    assert p.returncode == 0, p.err
    p = run_cli("clone", "-m", "cosyvoice3", "Hello there.", "--ref", "me.wav", "--x-vector-only", *common,
                "-o", "c.wav")   # cross-lingual
    assert p.returncode == 0, p.err
    p = run_cli("speak", "-m", "cosyvoice3", "Hello there.", "--voice", "me.safetensors", *common, "-o", "d.wav")
    assert p.returncode == 0, p.err
    p = run_cli("speak", "-m", "cosyvoice3", "Hello there.", "--voice", "me.safetensors", "--instruct",
                "Speak slowly.", *common, "-o", "e.wav")
    assert p.returncode == 0, p.err
    for name in "abcde":
        wav, sr = sf.read(str(tmp_path / f"{name}.wav"))
        assert sr == 24000 and len(wav) > 0


def test_errors_are_one_line_and_no_file(run_cli, tmp_path):
    p = run_cli("speak", "-m", "cosyvoice3", "--model-dir", TINY, "Hello there.", "--max-frames", "3",
                "--no-do-sample", "-o", "x.wav")
    assert p.returncode != 0 and "limit of 3 speech tokens" in only_line(p.err)
    p = run_cli("speak", "-m", "cosyvoice3", "--model-dir", TINY, "Hi.", "--voice", "ryan", "-o", "x.wav")
    assert p.returncode != 0 and "ryan" in only_line(p.err)
    p = run_cli("speak", "-m", "cosyvoice3", "--model-dir", TINY, "Hi.", "--top-p", "2", "-o", "x.wav")
    assert p.returncode != 0 and "--top-p" in only_line(p.err)
    p = run_cli("speak", "-m", "cosyvoice3", "--model-dir", TINY, "Hi.", "--language", "en", "-o", "x.wav")
    assert p.returncode != 0 and "--language" in only_line(p.err)
    no_files(tmp_path)
