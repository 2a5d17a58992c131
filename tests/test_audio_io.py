import io
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from ttscli.audio import FileSink, StreamSink, read_reference, resample
from ttscli.errors import AudioInputError
from ttscli.generate import Request, crossfade_join, synthesize
from ttscli.models.base import Pipeline


def test_stream_wav_is_readable_and_matches():
    buf = io.BytesIO()
    s = StreamSink(16000, "wav", buf)
    x = np.sin(np.linspace(0, 100, 1600)).astype(np.float32) * 0.5
    s.write(x[:800])
    s.write(x[800:])
    s.close()
    data = buf.getvalue()
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    pcm = np.frombuffer(data[44:], "<i2").astype(np.float32) / 32767
    assert np.abs(pcm - x).max() < 1e-4


def test_pcm_stream_has_no_header():
    buf = io.BytesIO()
    s = StreamSink(16000, "pcm", buf)
    s.write(np.zeros(10, np.float32))
    s.close()
    assert len(buf.getvalue()) == 20


@pytest.mark.parametrize("ext", ["wav", "flac", "ogg"])
def test_file_sink_is_atomic(tmp_path, ext):
    out = tmp_path / f"a.{ext}"
    s = FileSink(out, 22050, ext)
    s.write(np.zeros(1000, np.float32))
    assert not out.exists()  # only the temp file exists until close
    s.close()
    rate = 24000 if ext == "ogg" else 22050  # Ogg Opus runs at Opus's next rate above 22,050 Hz
    assert out.exists() and sf.info(str(out)).samplerate == rate
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would make it, not mkstemp's 0600


def test_file_sink_abort_leaves_nothing(tmp_path):
    s = FileSink(tmp_path / "b.wav", 22050, "wav")
    s.write(np.zeros(1000, np.float32))
    s.abort()
    assert list(tmp_path.iterdir()) == []


def test_reference_downmix_and_resample(tmp_path):
    sr = 44100
    t = np.arange(sr * 2) / sr
    left = 0.3 * np.sin(2 * np.pi * 220 * t)
    stereo = np.stack([left, left], axis=1).astype(np.float32)
    sf.write(str(tmp_path / "r.flac"), stereo, sr)
    mono, rate = read_reference(tmp_path / "r.flac")
    assert rate == sr and mono.ndim == 1
    y = resample(mono, rate, 24000)
    assert abs(len(y) - 48000) <= 1
    assert abs(np.sqrt(np.mean(y ** 2)) - 0.3 / np.sqrt(2)) < 0.01


def test_reference_too_short(tmp_path):
    sf.write(str(tmp_path / "s.wav"), np.ones(100, np.float32) * 0.1, 16000)
    with pytest.raises(AudioInputError, match="at least"):
        read_reference(tmp_path / "s.wav")


class FakePipeline(Pipeline):
    """Deterministic stand-in: audio is a function of (text, seed) only."""
    sample_rate = 1000
    max_chunk_chars = 20
    concurrent_safe = True

    def generate(self, r: Request):
        rng = np.random.default_rng([len(r.text), r.seed or 0])
        for _ in range(3):
            yield rng.standard_normal(37).astype(np.float32)


def test_workers_give_the_same_audio_as_one():
    text = "One sentence here. Another one there. And a third. Plus a fourth one. Fifth."
    req = Request(text=text, seed=7)
    one = np.concatenate(list(synthesize(FakePipeline(), req, workers=1)))
    four = np.concatenate(list(synthesize(FakePipeline(), req, workers=4)))
    assert np.array_equal(one, four)


def test_crossfade_join_is_independent_of_piece_boundaries():
    rng = np.random.default_rng(0)
    chunks = [rng.standard_normal(n).astype(np.float32) for n in (500, 300, 400)]
    whole = np.concatenate(list(crossfade_join(iter([(i, c) for i, c in enumerate(chunks)]), 50)))
    pieces = [(i, p) for i, c in enumerate(chunks) for p in np.array_split(c, 7)]
    split = np.concatenate(list(crossfade_join(iter(pieces), 50)))
    assert np.array_equal(whole, split)
    assert len(whole) == 1200 - 2 * 50
    # crossfade region blends the two chunks
    w = np.sin(np.linspace(0, np.pi / 2, 50, dtype=np.float32)) ** 2
    assert np.allclose(whole[450:500], chunks[0][450:] * (1 - w) + chunks[1][:50] * w)


def test_stale_parts_removed_only_when_their_writer_is_gone(tmp_path):
    import time

    from ttscli.outfile import STALE_PART_S, remove_stale_parts

    dead = tmp_path / ".o.wav.999999999.x1.part"
    live = tmp_path / f".o.wav.{os.getppid()}.x2.part"
    live_old = tmp_path / f".o.wav.{os.getppid()}.x3.part"
    unrelated = tmp_path / ".other.wav.999999999.x4.part"
    for p in (dead, live, live_old, unrelated):
        p.write_bytes(b"x")
    t = time.time() - STALE_PART_S - 10
    os.utime(live_old, (t, t))
    removed = remove_stale_parts(tmp_path, "o.wav")
    assert sorted(removed) == sorted([dead.name, live_old.name])
    assert live.exists() and unrelated.exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see a zombie")
def test_a_zombie_writer_counts_as_gone(tmp_path):
    """A killed writer that nothing reaps (its parent died, and PID 1 does not reap) stays a
    zombie: kill(pid, 0) still succeeds on it, yet its temp file is stale."""
    import subprocess
    import time

    from ttscli.outfile import remove_stale_parts

    child = subprocess.Popen(["sleep", "0"])  # not waited for: a zombie once it exits
    try:
        for _ in range(500):
            if Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.01)
        else:
            pytest.fail("the child never exited")
        os.kill(child.pid, 0)  # the case: the pid still answers
        part = tmp_path / f".o.wav.{child.pid}.x1.part"
        part.write_bytes(b"x")
        assert remove_stale_parts(tmp_path, "o.wav") == [part.name] and not part.exists()
    finally:
        child.wait()


def test_file_sink_registers_and_releases_its_temp_file(tmp_path):
    from ttscli.outfile import _LIVE, remove_partial_files

    s = FileSink(tmp_path / "a.wav", 16000, "wav")
    assert s.out in _LIVE and str(os.getpid()) in s.tmp.name and s.tmp.exists()
    s.write(np.zeros(100, np.float32))
    remove_partial_files()  # what the CLI runs on any way out
    assert not s.tmp.exists() and s.out not in _LIVE


def test_stream_sink_reports_a_closed_reader_as_output_closed():
    from ttscli.errors import OutputClosed

    class Closed(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(OutputClosed):
        StreamSink(16000, "wav", Closed()).write(np.zeros(10, np.float32))


def test_special_file_kinds(tmp_path):
    from ttscli.audio import format_for, special_file

    os.mkfifo(tmp_path / "f")
    (tmp_path / "r.wav").write_bytes(b"")
    assert special_file(str(tmp_path / "f")) == "a FIFO"
    assert special_file("/dev/null") == "a device"
    assert special_file(str(tmp_path / "r.wav")) is None and special_file("-") is None
    assert format_for("/dev/null", None) == "wav" and format_for(str(tmp_path / "f"), "pcm") == "pcm"


def test_file_sink_writes_through_a_symlink(tmp_path):
    """-o LINK: the write lands in the link's final target (temp file beside the target, renamed
    onto it); the links stay links."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    target = b / "t.wav"
    target.write_bytes(b"old")
    (a / "l1.wav").symlink_to(target)
    (a / "l2.wav").symlink_to("l1.wav")                    # relative, and a chain
    s = FileSink(a / "l2.wav", 16000, "wav")
    s.write(np.zeros(800, np.float32))
    assert [p.name for p in a.iterdir() if p.name.endswith(".part")] == []
    assert len([p for p in b.iterdir() if p.name.endswith(".part")]) == 1
    s.close()
    assert (a / "l2.wav").is_symlink() and os.readlink(a / "l2.wav") == "l1.wav"
    assert (a / "l1.wav").is_symlink() and Path(os.readlink(a / "l1.wav")) == target
    assert sf.info(str(target)).frames == 800 and sorted(p.name for p in b.iterdir()) == ["t.wav"]


def test_file_sink_through_a_symlink_aborts_cleanly(tmp_path):
    target = tmp_path / "t.wav"
    target.write_bytes(b"old")
    (tmp_path / "l.wav").symlink_to(target)
    s = FileSink(tmp_path / "l.wav", 16000, "wav")
    s.write(np.zeros(10, np.float32))
    s.abort()
    assert target.read_bytes() == b"old" and (tmp_path / "l.wav").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.wav", "t.wav"]


def test_dangling_and_looping_symlinks(tmp_path):
    from ttscli.audio import check_output
    from ttscli.errors import UsageError

    (tmp_path / "d.wav").symlink_to(tmp_path / "new.wav")      # dangling: the target is created
    s = FileSink(tmp_path / "d.wav", 16000, "wav")
    s.write(np.zeros(10, np.float32))
    s.close()
    assert (tmp_path / "d.wav").is_symlink() and sf.info(str(tmp_path / "new.wav")).frames == 10
    (tmp_path / "x.wav").symlink_to(tmp_path / "nowhere" / "x.wav")
    with pytest.raises(UsageError, match="output folder .*nowhere does not exist"):
        check_output(str(tmp_path / "x.wav"))              # before any model work
    (tmp_path / "p.wav").symlink_to("q.wav")
    (tmp_path / "q.wav").symlink_to("p.wav")
    with pytest.raises(UsageError, match=r"p.wav is a symlink that cannot be followed"):
        check_output(str(tmp_path / "p.wav"))
    with pytest.raises(UsageError, match=r"p.wav is a symlink that cannot be followed"):
        FileSink(tmp_path / "p.wav", 16000, "wav")
