"""`ttscli clone|speak -m indextts2` on the tiny folder, as a user runs it: the emotion modes, a
saved voice, forced lengths, and the errors (one line, non-zero exit, no partial file)."""
from pathlib import Path

import numpy as np
import soundfile as sf
from clitools import no_files, only_line

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
TINY = FIX / "tiny"


def _ref(tmp_path: Path) -> None:
    sf.write(str(tmp_path / "me.wav"), np.load(FIX / "frontend.npz")["ref22"], 22050)


def test_clone_modes_and_saved_voice(run_cli, tmp_path):
    _ref(tmp_path)
    common = ["-m", "indextts2", "--model-dir", TINY, "--seed", "0"]
    runs = {"a": ["clone", "Hello there.", "--ref", "me.wav", "--save-voice", "me.safetensors"],
            "b": ["clone", "Hello there.", "--ref", "me.wav", "--emotion", "happy=0.8,calm=0.2", "--tokens", "9"],
            "c": ["clone", "Hello there.", "--ref", "me.wav", "--emotion-ref", "me.wav", "--emotion-alpha", "0.5",
                  "--duration", "0.4"],
            "d": ["clone", "Hello there.", "--ref", "me.wav", "--instruct", "我好难过", "--stream"],
            "e": ["speak", "Hello there.", "--voice", "me.safetensors", "--num-beams", "1", "--tokens", "8"]}
    for name, args in runs.items():
        p = run_cli(*args, *common, "-o", f"{name}.wav")
        assert p.returncode == 0, (name, p.err)
        wav, sr = sf.read(str(tmp_path / f"{name}.wav"))
        assert sr == 22050 and len(wav) > 0
    assert len(sf.read(str(tmp_path / "b.wav"))[0]) == 15 * 256     # 9 codes -> int(9 x 1.72) mel frames


def test_errors_are_one_line_and_no_file(run_cli, tmp_path):
    _ref(tmp_path)
    base = ["-m", "indextts2", "--model-dir", TINY, "-o", "x.wav"]
    cases = [(["speak", "Hi."], "cloned voice"),
             (["clone", "Hi.", "--ref", "me.wav", "--emotion", "joy=1"], "unknown emotion 'joy'"),
             (["clone", "Hi.", "--ref", "me.wav", "--emotion", "happy=1", "--instruct", "calm"], "one emotion source"),
             (["clone", "Hi.", "--ref", "me.wav", "--emotion-alpha", "2"], "--emotion-alpha"),
             (["clone", "Hi.", "--ref", "me.wav", "--max-frames", "2", "--num-beams", "1", "--no-do-sample",
               "--repetition-penalty", "1", "--emotion", "happy=1.2"], "limit of 2 codes"),
             (["clone", "Hi.", "--ref", "me.wav", "--language", "en"], "--language")]
    for args, words in cases:
        p = run_cli(*args, *base)
        assert p.returncode != 0 and words in only_line(p.err), (args, p.err)
    (tmp_path / "me.wav").unlink()
    no_files(tmp_path)
