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
    assert "raise it with --max-frames" in only_line(p.err)    # the option that exists
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


def test_stream_first_chunk(run_cli, tmp_path):
    """--stream's first chunk is Chatterbox's own (8 speech tokens) unless given; fewer than the
    first pass needs to make audio is one line and no file, never silently raised."""
    p = run_cli("speak", "-m", "chatterbox", "--model-dir", TINY, "Hello there.", "--stream",
                "--first-chunk-frames", "3", "--max-frames", "12", "-o", "out.wav")
    assert p.returncode != 0
    assert "--first-chunk-frames 3: Chatterbox's first streamed audio needs at least 8" in only_line(p.err)
    no_files(tmp_path)
    p = run_cli("speak", "-m", "chatterbox", "--model-dir", TINY, "Hello there.", "--stream", "--max-frames", "12",
                "--seed", "1", "--temperature", "0", "-o", "out.wav")
    assert p.returncode != 0 and "limit of 12 speech tokens" in only_line(p.err)   # streamed, then the limit
    no_files(tmp_path)


def test_request_first_chunk_defaults_to_the_familys():
    from ttscli.generate import Request, check_request
    from ttscli.models import family_of
    from ttscli.registry import load_registry

    spec = load_registry().resolve("chatterbox")
    fam = family_of(spec)
    assert check_request(spec, fam, Request(text="Hi.", stream=True)).first_chunk_frames == 8
    assert check_request(spec, fam, Request(text="Hi.", stream=True, first_chunk_frames=12)).first_chunk_frames == 12
