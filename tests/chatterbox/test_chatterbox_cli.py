"""`ttscli speak|clone -m chatterbox` on the tiny checkpoint, as a user runs it: the family's
knobs and its errors (one line, non-zero exit, no partial file)."""
from pathlib import Path

import numpy as np
import soundfile as sf
from clitools import no_files, only_line

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox" / "tiny"
G = np.load(TINY.parent / "t3_goldens.npz")


def test_token_limit_is_one_line_and_no_file(run_cli, tmp_path):
    # the tiny model's stop token is (deliberately) almost never drawn
    p = run_cli("speak", "-m", "chatterbox", "--model-dir", TINY, "Hello there.", "--max-frames", "6",
                "--seed", "1", "-o", "out.wav")
    assert p.returncode != 0
    assert "limit of 6 speech tokens" in only_line(p.err)
    no_files(tmp_path)


def test_bad_knobs_and_voices(run_cli, tmp_path):
    p = run_cli("speak", "-m", "chatterbox", "--model-dir", TINY, "Hi.", "--exaggeration", "5", "-o", "x.wav")
    assert p.returncode != 0 and "--exaggeration" in only_line(p.err)
    p = run_cli("speak", "-m", "chatterbox", "--model-dir", TINY, "Hi.", "--voice", "ryan", "-o", "x.wav")
    assert p.returncode != 0 and "no preset voices" in only_line(p.err)
    no_files(tmp_path)


def test_clone_refuses_silence(run_cli, tmp_path):
    sf.write(str(tmp_path / "silence.wav"), np.zeros(24000, np.float32), 24000)
    p = run_cli("clone", "-m", "chatterbox", "--model-dir", TINY, "--ref", "silence.wav", "Hi.", "-o", "x.wav")
    assert p.returncode != 0
    only_line(p.err)
    assert not (tmp_path / "x.wav").exists()
