"""`ttscli speak` output formats with the embedded voice: true WAV sizes in a file and in a
redirected stdout, every compressed format decoding to the length of the WAV (file and stream),
--sample-rate, and an extension that does not match --format refused."""
from __future__ import annotations

import io
import os
import subprocess
import wave

import numpy as np
import pytest
import soundfile as sf

from clitools import no_files, only_line, ttscli_exe

av = pytest.importorskip("av")

TEXT = "Formats that stream. A second sentence."
PADDING_S = 0.1      # codec delay and frame padding a decoder may keep (MP3's, AAC's)


def cli_env(cache) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TTSCLI_CACHE": str(cache)}


@pytest.fixture(scope="module")
def wav_seconds(tmp_path_factory, shared_cache) -> float:
    """The length of TEXT as a WAV at the model's rate (seeded, so every run below says the same)."""
    out = tmp_path_factory.mktemp("ref") / "ref.wav"
    p = subprocess.run(ttscli_exe() + ["speak", TEXT, "--seed", "1", "-o", str(out)], env=cli_env(shared_cache),
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return sf.info(str(out)).duration


def decoded_seconds(data: bytes) -> float:
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.audio[0]
        return sum(f.samples for f in c.decode(s)) / s.rate


def check_wav_sizes(data: bytes, rate: int) -> int:
    with wave.open(io.BytesIO(data)) as w:
        assert w.getframerate() == rate
        frames = w.getnframes()
    assert frames == (len(data) - 44) // 2 and int.from_bytes(data[4:8], "little") == len(data) - 8
    return frames


def test_stream_sink_into_a_regular_file_gets_true_sizes(tmp_path):
    from ttscli.audio import StreamSink

    path = tmp_path / "redirected.wav"
    with open(path, "wb") as f:
        f.write(b"")   # a shell's `> file`: an empty regular file open for writing
        s = StreamSink(16000, "wav", f)
        for _ in range(3):
            s.write(np.full(1000, 0.25, np.float32))
        s.close()
    assert check_wav_sizes(path.read_bytes(), 16000) == 3000


def test_redirected_stdout_wav_has_true_sizes(tmp_path, shared_cache, wav_seconds):
    out = tmp_path / "p.wav"
    with open(out, "wb") as f:
        p = subprocess.run(ttscli_exe() + ["speak", "-", "--seed", "1"], input=TEXT.encode(), stdout=f,
                           stderr=subprocess.PIPE, env=cli_env(shared_cache), timeout=300)
    assert p.returncode == 0, p.stderr
    frames = check_wav_sizes(out.read_bytes(), 22050)
    assert abs(frames / 22050 - wav_seconds) < 1e-3
    x, sr = sf.read(str(out))
    assert len(x) == frames


def test_file_at_another_sample_rate_has_true_sizes(run_cli, tmp_path, wav_seconds):
    p = run_cli("speak", TEXT, "--seed", "1", "--sample-rate", "24000", "-o", "r.wav")
    assert p.returncode == 0, p.err
    frames = check_wav_sizes((tmp_path / "r.wav").read_bytes(), 24000)
    assert abs(frames / 24000 - wav_seconds) < 1e-3


@pytest.mark.parametrize("name,codec", [("x.opus", "opus"), ("x.ogg", "opus"), ("x.aac", "aac"), ("x.m4a", "aac")])
def test_compressed_file_decodes_to_the_wav_length(run_cli, tmp_path, wav_seconds, name, codec):
    """The formats libsndfile could not write (.mp3 and .flac files: tests/test_cli_speak.py)."""
    p = run_cli("speak", TEXT, "--seed", "1", "-o", name)
    assert p.returncode == 0, p.err
    data = (tmp_path / name).read_bytes()
    with av.open(io.BytesIO(data)) as c:
        assert c.streams.audio[0].codec_context.codec.id == av.Codec(codec, "r").id
    seconds = decoded_seconds(data)
    assert wav_seconds - 0.01 <= seconds <= wav_seconds + PADDING_S, (seconds, wav_seconds)


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac"])
def test_compressed_stdout_stream_decodes_to_the_wav_length(run_cli, wav_seconds, fmt):
    p = run_cli("speak", TEXT, "--seed", "1", "-o", "-", "--format", fmt)
    assert p.returncode == 0, p.err
    seconds = decoded_seconds(p.stdout)
    assert wav_seconds - 0.01 <= seconds <= wav_seconds + PADDING_S, (seconds, wav_seconds)


@pytest.mark.parametrize("name,fmt", [("x.wav", "mp3"), ("x.mp3", "wav"), ("x.flac", "opus"), ("x.m4a", "aac")])
def test_extension_and_format_mismatch_is_refused(run_cli, tmp_path, name, fmt):
    p = run_cli("speak", "Hi.", "-o", name, "--format", fmt)
    assert p.returncode == 2
    assert f"--format {fmt}" in only_line(p.err) and "name it" in p.err
    no_files(tmp_path)
