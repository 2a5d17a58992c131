"""Audio in and out: reference audio reading, atomic file writes, stdout streaming, playback."""
from __future__ import annotations

import os
import struct
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ttscli.errors import AudioInputError, BackendUnavailableError, UsageError

# extension -> (libsndfile major format, subtype)
FORMATS = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "ogg": ("OGG", "VORBIS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
}
STREAM_FORMATS = ("wav", "pcm")


def to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1.0, 1.0) * 32767.0).round().astype("<i2")


def format_for(path: str, fmt: str | None) -> str:
    """The output format: --format if given, else the file extension."""
    if fmt:
        fmt = fmt.lower()
        if path == "-":
            if fmt not in STREAM_FORMATS:
                raise UsageError(f"--format {fmt} cannot stream to stdout; use wav or pcm")
            return fmt
        if fmt not in FORMATS:
            raise UsageError(f"unknown --format {fmt}; use one of {', '.join([*FORMATS, 'pcm'])}")
        return fmt
    if path == "-":
        return "wav"
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in FORMATS:
        known = ", ".join("." + e for e in FORMATS)
        raise UsageError(f"cannot tell the audio format of '{path}': use an extension ({known}) or --format")
    return ext


def check_format_supported(fmt: str) -> None:
    if fmt in STREAM_FORMATS:
        return
    import soundfile as sf

    major, subtype = FORMATS[fmt]
    if major not in sf.available_formats() or subtype not in sf.available_subtypes(major):
        raise BackendUnavailableError(
            f"the installed libsndfile {sf.__libsndfile_version__} cannot write {fmt}; use wav, flac or ogg"
        )


class Sink:
    """Receives float32 mono chunks. `close()` commits, `abort()` leaves nothing behind."""

    def write(self, chunk: np.ndarray) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...


class FileSink(Sink):
    """Writes to a temp file beside the target, renamed into place only on close()."""

    def __init__(self, path: str | Path, sample_rate: int, fmt: str):
        import soundfile as sf

        self.path = Path(path)
        folder = self.path.parent if str(self.path.parent) else Path(".")
        if not folder.is_dir():
            raise UsageError(f"output folder {folder} does not exist")
        if self.path.is_dir():
            raise UsageError(f"output {self.path} is a folder; give a file name")
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".part", dir=folder)
        os.close(fd)
        self.tmp = Path(tmp)
        major, subtype = FORMATS[fmt]
        try:
            self.f = sf.SoundFile(self.tmp, "w", samplerate=sample_rate, channels=1, format=major, subtype=subtype)
        except Exception as e:
            self.tmp.unlink(missing_ok=True)
            raise BackendUnavailableError(f"cannot write {fmt} with libsndfile: {e}") from None
        self.frames = 0

    def write(self, chunk: np.ndarray) -> None:
        self.f.write(np.clip(np.asarray(chunk, dtype=np.float32), -1.0, 1.0))
        self.frames += len(chunk)

    def close(self) -> None:
        self.f.close()
        # mkstemp makes the file 0600; give it the mode a plain open() would have had
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o666 & ~umask)
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        try:
            self.f.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def wav_header(sample_rate: int, n_samples: int | None = None) -> bytes:
    """16-bit mono WAV header; unknown length (streaming) uses the 0xFFFFFFFF convention."""
    data = 0xFFFFFFFF if n_samples is None else n_samples * 2
    riff = 0xFFFFFFFF if n_samples is None else 36 + data
    return (
        b"RIFF" + struct.pack("<I", riff) + b"WAVE"
        + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data" + struct.pack("<I", data)
    )


class StreamSink(Sink):
    """WAV (streaming header) or raw s16le PCM to a binary stream, flushed per chunk."""

    def __init__(self, sample_rate: int, fmt: str = "wav", stream: BinaryIO | None = None):
        self.out = stream or sys.stdout.buffer
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.started = False

    def _start(self):
        if not self.started and self.fmt == "wav":
            self.out.write(wav_header(self.sample_rate))
        self.started = True

    def write(self, chunk: np.ndarray) -> None:
        self._start()
        self.out.write(to_int16(chunk).tobytes())
        self.out.flush()

    def close(self) -> None:
        self._start()
        self.out.flush()

    def abort(self) -> None:
        pass  # a pipe reader sees the stream end; nothing on disk to remove


class PlaySink(Sink):
    def __init__(self, sample_rate: int):
        try:
            import sounddevice as sd
        except (ImportError, OSError) as e:
            raise BackendUnavailableError(
                f"--play needs PortAudio ({e}); install it (e.g. `apt install libportaudio2`) or write a file with -o"
            ) from None
        try:
            self.stream = sd.OutputStream(samplerate=sample_rate, channels=1, dtype="float32")
            self.stream.start()
        except Exception as e:
            raise BackendUnavailableError(f"--play: no usable audio output device ({e}); write a file with -o") from None

    def write(self, chunk: np.ndarray) -> None:
        self.stream.write(np.ascontiguousarray(chunk, dtype=np.float32).reshape(-1, 1))

    def close(self) -> None:
        self.stream.stop()
        self.stream.close()

    def abort(self) -> None:
        self.stream.abort()
        self.stream.close()


class MultiSink(Sink):
    def __init__(self, sinks: list[Sink]):
        self.sinks = sinks

    def write(self, chunk):
        for s in self.sinks:
            s.write(chunk)

    def close(self):
        for s in self.sinks:
            s.close()

    def abort(self):
        for s in self.sinks:
            try:
                s.abort()
            except Exception:
                pass


def check_output(output: str | None, fmt: str | None = None) -> None:
    """Validate -o/--format before any model work, so mistakes cost nothing."""
    if output is None:
        if fmt is not None:
            raise UsageError("--format needs -o/--output (a file, or - for stdout)")
        return
    f = format_for(output, fmt)
    check_format_supported(f)
    if output != "-":
        path = Path(output)
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise UsageError(f"output folder {folder} does not exist")
        if path.is_dir():
            raise UsageError(f"output {path} is a folder; give a file name")


def open_sink(output: str | None, sample_rate: int, fmt: str | None = None, play: bool = False) -> Sink:
    sinks: list[Sink] = []
    if output is not None:
        f = format_for(output, fmt)
        check_format_supported(f)
        sinks.append(StreamSink(sample_rate, f) if output == "-" else FileSink(output, sample_rate, f))
    elif fmt is not None:
        raise UsageError("--format needs -o/--output (a file, or - for stdout)")
    if play:
        try:
            sinks.append(PlaySink(sample_rate))
        except Exception:
            for s in sinks:
                s.abort()
            raise
    if not sinks:
        raise UsageError("nowhere to put the audio: give -o FILE, -o - (stdout) or --play")
    return sinks[0] if len(sinks) == 1 else MultiSink(sinks)


# ---- reference audio -----------------------------------------------------------------------

SILENCE_RMS = 1e-4


def resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    if sr_in == sr_out:
        return x.astype(np.float32, copy=False)
    import soxr

    return soxr.resample(x, sr_in, sr_out, quality="HQ").astype(np.float32)


def read_reference(path: str | Path, max_seconds: float = 30.0, min_seconds: float = 0.5) -> tuple[np.ndarray, int]:
    """Any format soundfile reads, any rate/channels -> (mono float32, its rate), validated."""
    import soundfile as sf

    path = Path(path)
    if not path.is_file():
        raise AudioInputError(f"reference audio {path} does not exist")
    try:
        info = sf.info(str(path))
        duration = info.frames / info.samplerate if info.samplerate else 0.0
        if duration > max_seconds:
            raise AudioInputError(
                f"reference audio {path} is {duration:.1f} s; the limit is {max_seconds:g} s: trim it"
            )
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except AudioInputError:
        raise
    except Exception as e:
        raise AudioInputError(f"cannot read reference audio {path}: {str(e).splitlines()[0]}") from None
    mono = data.mean(axis=1)
    if len(mono) / sr < min_seconds:
        raise AudioInputError(f"reference audio {path} is {len(mono) / sr:.2f} s; give at least {min_seconds:g} s")
    if not np.all(np.isfinite(mono)):
        raise AudioInputError(f"reference audio {path} contains NaN or infinite samples")
    if float(np.sqrt(np.mean(mono.astype(np.float64) ** 2))) < SILENCE_RMS:
        raise AudioInputError(f"reference audio {path} is silent; record some speech")
    return mono, sr
