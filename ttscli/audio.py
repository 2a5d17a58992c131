"""Audio in and out: reference audio reading, audio files (written through ttscli.outfile), stdout
streaming, playback."""
from __future__ import annotations

import errno
import os
import struct
import sys
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ttscli.errors import (AudioInputError, BackendUnavailableError, OutputClosed, OutputError, UsageError,
                           os_cause, os_error)
from ttscli.outfile import AtomicFile, check_writable, open_in_place, resolve

# extension -> (libsndfile major format, subtype)
FORMATS = {
    "wav": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_16"),
    "ogg": ("OGG", "VORBIS"),
    "mp3": ("MP3", "MPEG_LAYER_III"),
}
STREAM_FORMATS = ("wav", "pcm")
STREAM_KINDS = ("a FIFO", "a device")     # -o targets written in place, as a stream


def to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1.0, 1.0) * 32767.0).round().astype("<i2")


def special_file(path: str) -> str | None:
    """What a FIFO, device node or socket at -o is ("a FIFO", "a device", "a socket"), else None:
    FIFOs and devices are written directly, as -o - is, never replaced by a rename (as root, -o
    /dev/null would otherwise replace the system's /dev/null with a regular file). The path is
    walked as a write walks it (:func:`ttscli.outfile.resolve`): a planted link is refused here."""
    if path == "-":
        return None
    with resolve(path) as dest:
        return dest.kind if dest.kind in (*STREAM_KINDS, "a socket") else None


def format_for(path: str, fmt: str | None) -> str:
    """The output format: --format if given, else the file extension."""
    kind = "stdout" if path == "-" else special_file(path)
    if fmt:
        fmt = fmt.lower()
        if kind:
            if fmt not in STREAM_FORMATS:
                where = "stdout" if kind == "stdout" else f"{path} ({kind})"
                raise UsageError(f"--format {fmt} cannot stream to {where}; use wav or pcm")
            return fmt
        if fmt not in FORMATS:
            raise UsageError(f"unknown --format {fmt}; use one of {', '.join([*FORMATS, 'pcm'])}")
        return fmt
    if kind:
        ext = Path(path).suffix.lower().lstrip(".")
        if kind != "stdout" and ext in FORMATS and ext not in STREAM_FORMATS:
            raise UsageError(f"{path} is {kind}: it can take a stream of wav or pcm, not {ext}")
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


def _libsndfile_failure(sf_file, path: Path, err: Exception, fd: int) -> Exception:
    """libsndfile reports a failed write(2) as "System error."; its per-file message keeps the
    strerror, which names the cause (full disk, quota, file size limit). ``fd`` is the file
    being written, asked whether its file system is full when no cause was kept."""
    detail = ""
    try:
        import soundfile as sf

        detail = sf._ffi.string(sf._snd.sf_strerror(sf_file._file)).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 - best effort: reads libsndfile's message through soundfile's private handles
        pass
    text = detail.split(":", 1)[-1].strip().rstrip(".") if "System error" in detail else ""
    by_text = {os.strerror(n): n for n in errno.errorcode}
    errnum = by_text.get(text)
    if errnum is None and text == "":
        try:  # no message kept: a full disk is the likely system error; look
            errnum = errno.ENOSPC if os.fstatvfs(fd).f_bavail == 0 else None
        except OSError:
            pass
    if errnum is not None and os_cause(errnum):
        return os_error(OSError(errnum, os.strerror(errnum)), path)
    return OutputError(f"cannot write {path}: {text or str(err).splitlines()[0]}")


class FileSink(Sink):
    """Writes a temp file beside the target, renamed onto it only on close()
    (:class:`ttscli.outfile.AtomicFile`: links others planted are refused, a replaced file keeps
    its mode and owner, a new one gets the umask's mode)."""

    def __init__(self, path: str | Path, sample_rate: int, fmt: str):
        import soundfile as sf

        dest = resolve(path)
        if dest.kind in (*STREAM_KINDS, "a socket"):
            kind = dest.kind
            dest.close()
            raise UsageError(f"output {path} is {kind}, not a file")
        self.out = AtomicFile(dest)
        self.path = self.out.path
        major, subtype = FORMATS[fmt]
        try:
            self.f = sf.SoundFile(self.out.fd, "w", samplerate=sample_rate, channels=1, format=major,
                                  subtype=subtype, closefd=False)
        except Exception as e:  # noqa: BLE001 - soundfile/libsndfile raise many types; OSError is sorted out below
            self.out.discard()
            if isinstance(e, OSError) and os_error(e, self.path):
                raise os_error(e, self.path) from None
            raise BackendUnavailableError(f"cannot write {fmt} with libsndfile: {e}") from None
        self.frames = 0

    @property
    def tmp(self) -> Path:
        return self.out.tmp

    def write(self, chunk: np.ndarray) -> None:
        try:
            self.f.write(np.clip(np.asarray(chunk, dtype=np.float32), -1.0, 1.0))
        except Exception as e:  # noqa: BLE001 - soundfile/libsndfile raise many types; all become one output error
            raise _libsndfile_failure(self.f, self.path, e, self.out.fd) from None
        self.frames += len(chunk)

    def close(self) -> None:
        try:
            self.f.close()  # writes the header's final sizes: can fail on a full disk too
        except Exception as e:  # noqa: BLE001 - soundfile/libsndfile raise many types; all become one output error
            failure = _libsndfile_failure(self.f, self.path, e, self.out.fd)
            self.out.discard()
            raise failure from None
        except BaseException:
            self.out.discard()
            raise
        self.out.commit()

    def abort(self) -> None:
        try:
            self.f.close()
        except Exception:  # noqa: BLE001 - cleanup on abort: the data is thrown away anyway
            pass  # the data is being thrown away; a failed header update does not matter
        finally:
            self.out.discard()


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
        with self._errors():
            self._start()
            self.out.write(to_int16(chunk).tobytes())
            self.out.flush()

    def close(self) -> None:
        with self._errors():
            self._start()
            self.out.flush()

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

    def __init__(self, path: str, sample_rate: int, fmt: str):
        with resolve(path) as dest:
            if dest.kind not in STREAM_KINDS:
                raise UsageError(f"output {path} is no longer a FIFO or device")
            try:
                fd = open_in_place(dest)
            except OSError as e:
                raise os_error(e, path) or OutputError(f"cannot write {path}: {e.strerror}") from None
        super().__init__(sample_rate, fmt, os.fdopen(fd, "wb"))
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


def check_output(output: str | None, fmt: str | None = None) -> None:
    """Validate -o/--format before any model work, so mistakes cost nothing."""
    if output is None:
        if fmt is not None:
            raise UsageError("--format needs -o/--output (a file, or - for stdout)")
        return
    check_format_supported(format_for(output, fmt))
    if output != "-":
        check_writable(output)


def open_sink(output: str | None, sample_rate: int, fmt: str | None = None, play: bool = False) -> Sink:
    sinks: list[Sink] = []
    if output is not None:
        f = format_for(output, fmt)
        check_format_supported(f)
        if output == "-":
            sinks.append(StreamSink(sample_rate, f))
        elif special_file(output):
            sinks.append(SpecialFileSink(output, sample_rate, f))
        else:
            sinks.append(FileSink(output, sample_rate, f))
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
