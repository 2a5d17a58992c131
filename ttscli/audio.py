"""Audio in and out: reference audio reading, audio files (written through ttscli.outfile), stdout
streaming, playback."""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ttscli.encode import FORMATS, check_encoder, make_encoder, same_audio
from ttscli.errors import AudioInputError, BackendUnavailableError, OutputClosed, OutputError, UsageError, os_error
from ttscli.outfile import AtomicFile, check_writable, open_in_place, resolve

STREAM_KINDS = ("a FIFO", "a device")     # -o targets written in place, as a stream
BY_EXTENSION = {f.extension: f.name for f in FORMATS.values() if f.name != "pcm"}


def special_file(path: str) -> str | None:
    """What a FIFO, device node or socket at -o is ("a FIFO", "a device", "a socket"), else None:
    FIFOs and devices are written directly, as -o - is, never replaced by a rename (as root, -o
    /dev/null would otherwise replace the system's /dev/null with a regular file). The path is
    walked as a write walks it (:func:`ttscli.outfile.resolve`): a planted link is refused here."""
    if path == "-":
        return None
    with resolve(path) as dest:
        return dest.kind if dest.kind in (*STREAM_KINDS, "a socket") else None


def _known() -> str:
    return ", ".join(FORMATS)


def format_for(path: str, fmt: str | None) -> str:
    """The output format: --format if given, else the file extension. A --format that would put
    one format's data under another's extension (``-o x.wav --format mp3``) is refused, as is a
    format that cannot stream (m4a) sent to stdout, a FIFO or a device."""
    kind = "stdout" if path == "-" else special_file(path)
    ext = "" if path == "-" else Path(path).suffix.lower().lstrip(".")
    named = BY_EXTENSION.get(ext)
    if fmt:
        fmt = fmt.lower()
        if fmt not in FORMATS:
            raise UsageError(f"unknown --format {fmt}; use one of {_known()}")
        if named is not None and not same_audio(named, fmt):
            raise UsageError(f"-o {path} names a .{ext} file but --format {fmt} writes {fmt}: "
                             f"name it .{FORMATS[fmt].extension} or drop --format")
    elif kind:
        fmt = named or "wav"
    elif named is None:
        known = ", ".join("." + e for e in BY_EXTENSION)
        raise UsageError(f"cannot tell the audio format of '{path}': use an extension ({known}) or --format")
    else:
        fmt = named
    if kind and not FORMATS[fmt].streams:
        where = "stdout" if kind == "stdout" else f"{path} ({kind})"
        streamable = ", ".join(f.name for f in FORMATS.values() if f.streams)
        raise UsageError(f"{fmt} cannot stream to {where}: its index is written at the end; use one of {streamable}")
    return fmt


def check_format_supported(fmt: str) -> None:
    check_encoder(fmt)


class Sink:
    """Receives float32 mono chunks. `close()` commits, `abort()` leaves nothing behind."""

    def write(self, chunk: np.ndarray) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...


class FileSink(Sink):
    """Writes a temp file beside the target, renamed onto it only on close()
    (:class:`ttscli.outfile.AtomicFile`: links others planted are refused, a replaced file keeps
    its mode and owner, a new one gets the umask's mode). The file can be sought, so every header
    ends up true: a WAV's sizes are written over the open-ended ones at the end, and the
    compressed formats' muxers finish theirs (an MP3's length, FLAC's sample count, an M4A's index).
    ``out_rate``: the file's rate, resampled from ``sample_rate`` (default: the same)."""

    def __init__(self, path: str | Path, sample_rate: int, fmt: str, out_rate: int | None = None):
        dest = resolve(path)
        if dest.kind in (*STREAM_KINDS, "a socket"):
            kind = dest.kind
            dest.close()
            raise UsageError(f"output {path} is {kind}, not a file")
        self.out = AtomicFile(dest)
        self.path = self.out.path
        self.fmt = fmt
        with self.out.discarded_on_error():
            self.file = open(self.out.fd, "wb", buffering=0, closefd=False)
            self.encoder = make_encoder(fmt, sample_rate, out_rate, None if fmt in ("wav", "pcm") else self.file)
        self.frames = 0

    @property
    def tmp(self) -> Path:
        return self.out.tmp

    def _put(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.file.write(view):]

    def write(self, chunk: np.ndarray) -> None:
        with self._abandoned_on_error():
            self._put(self.encoder.push(chunk))
        self.frames += len(chunk)

    def close(self) -> None:
        with self._abandoned_on_error():
            self._put(self.encoder.finish())
            if self.fmt == "wav":
                os.pwrite(self.out.fd, self.encoder.header(), 0)
        self.out.commit()

    @contextmanager
    def _abandoned_on_error(self):
        """A failed write stops the encoder and removes the temp file (one line naming the target)."""
        with self.out.discarded_on_error():
            try:
                yield
            except BaseException:
                self.encoder.abandon()
                raise

    def abort(self) -> None:
        self.encoder.abandon()
        self.out.discard()


class StreamSink(Sink):
    """Any streaming format to a binary stream, flushed per chunk. A WAV goes out with the
    open-ended header; when the stream is a regular file opened for writing in place (a shell's
    ``> out.wav``), the true sizes are written over it at the end."""

    def __init__(self, sample_rate: int, fmt: str = "wav", stream: BinaryIO | None = None,
                 out_rate: int | None = None):
        self.out = stream or sys.stdout.buffer
        self.fmt = fmt
        self.encoder = make_encoder(fmt, sample_rate, out_rate)
        self.sample_rate = self.encoder.sample_rate
        self.start = self._header_offset() if fmt == "wav" else None

    def _header_offset(self) -> int | None:
        """Where the WAV header will land, if it can be written over later: a regular file not
        opened for appending (pwrite appends there on Linux)."""
        try:
            fd = self.out.fileno()
            if not stat.S_ISREG(os.fstat(fd).st_mode) or fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND:
                return None
            self.out.flush()
            return os.lseek(fd, 0, os.SEEK_CUR)
        except (OSError, ValueError, AttributeError):
            return None   # not a file descriptor (a test's buffer), or one that cannot seek

    def _send(self, data: bytes) -> None:
        with self._errors():
            if data:
                self.out.write(data)
            self.out.flush()

    def write(self, chunk: np.ndarray) -> None:
        self._send(self.encoder.push(chunk))

    def close(self) -> None:
        self._send(self.encoder.finish())
        if self.start is not None:
            with self._errors():
                os.pwrite(self.out.fileno(), self.encoder.header(), self.start)

    def abort(self) -> None:
        pass  # a pipe reader sees the stream end; nothing on disk to remove

    def _errors(self):
        return _stream_errors(getattr(self.out, "name", "stdout"))


class _stream_errors:
    """A reader that went away is OutputClosed (a quiet exit); /dev/full is a full disk."""

    def __init__(self, name):
        self.name = "stdout" if name in (1, "<stdout>") else name

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if isinstance(e, BrokenPipeError) or (isinstance(e, OSError) and e.errno == errno.EPIPE):
            raise OutputClosed(f"the reader of {self.name} went away") from None
        if isinstance(e, OSError):
            raise os_error(e, self.name) or OutputError(f"cannot write {self.name}: {e.strerror}") from None
        return False


class SpecialFileSink(StreamSink):
    """-o naming a FIFO or device: streamed into it directly like -o -, never renamed over."""

    def __init__(self, path: str, sample_rate: int, fmt: str, out_rate: int | None = None):
        with resolve(path) as dest:
            if dest.kind not in STREAM_KINDS:
                raise UsageError(f"output {path} is no longer a FIFO or device")
            try:
                fd = open_in_place(dest)
            except OSError as e:
                raise os_error(e, path) or OutputError(f"cannot write {path}: {e.strerror}") from None
        super().__init__(sample_rate, fmt, os.fdopen(fd, "wb"), out_rate)
        self.path = path

    def _errors(self):
        return _stream_errors(self.path)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._close_quietly()

    def abort(self) -> None:
        self._close_quietly()

    def _close_quietly(self) -> None:
        try:
            self.out.close()
        except OSError:
            pass


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
        except Exception as e:  # noqa: BLE001 - PortAudio/sounddevice raise many types; all mean no usable device
            raise BackendUnavailableError(
                f"--play: no usable audio output device ({e}); write a file with -o") from None

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
            except Exception:  # noqa: BLE001 - cleanup on abort: every sink gets its chance
                pass


def check_output(output: str | None, fmt: str | None = None, out_rate: int | None = None) -> None:
    """Validate -o/--format/--sample-rate before any model work, so mistakes cost nothing."""
    if output is None:
        if fmt is not None:
            raise UsageError("--format needs -o/--output (a file, or - for stdout)")
        if out_rate is not None:
            raise UsageError("--sample-rate needs -o/--output (a file, or - for stdout)")
        return
    check_format_supported(format_for(output, fmt))
    if output != "-":
        check_writable(output)


def open_sink(output: str | None, sample_rate: int, fmt: str | None = None, play: bool = False,
              out_rate: int | None = None) -> Sink:
    """Where the audio goes: -o (a file, -, a FIFO or device) at ``out_rate`` (default: the
    model's ``sample_rate``), and/or the speakers at the model's rate."""
    sinks: list[Sink] = []
    if output is not None:
        f = format_for(output, fmt)
        check_format_supported(f)
        if output == "-":
            sinks.append(StreamSink(sample_rate, f, out_rate=out_rate))
        elif special_file(output):
            sinks.append(SpecialFileSink(output, sample_rate, f, out_rate))
        else:
            sinks.append(FileSink(output, sample_rate, f, out_rate))
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
    except Exception as e:  # noqa: BLE001 - soundfile/libsndfile raise many types; all mean an unreadable file
        raise AudioInputError(f"cannot read reference audio {path}: {str(e).splitlines()[0]}") from None
    mono = data.mean(axis=1)
    if len(mono) / sr < min_seconds:
        raise AudioInputError(f"reference audio {path} is {len(mono) / sr:.2f} s; give at least {min_seconds:g} s")
    if not np.all(np.isfinite(mono)):
        raise AudioInputError(f"reference audio {path} contains NaN or infinite samples")
    if float(np.sqrt(np.mean(mono.astype(np.float64) ** 2))) < SILENCE_RMS:
        raise AudioInputError(f"reference audio {path} is silent; record some speech")
    return mono, sr
