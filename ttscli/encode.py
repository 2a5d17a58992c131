"""Incremental audio encoders: float32 mono chunks in, the bytes of a file or stream out as soon
as the codec makes them. The CLI's writers and the server's responses both use them, so every
format streams from the first chunk.

WAV and raw PCM are written here (16-bit little-endian). A WAV whose length is not known when its
header goes out uses the open-ended sizes 0xFFFFFFFF; a writer that can seek back puts the true
sizes there at the end (:func:`wav_header`). The compressed formats go through PyAV (FFmpeg's
encoders and muxers): MP3 (LAME), Opus in Ogg, AAC in ADTS frames (each frame carries its own
header, so it streams) and FLAC. Each packet is written out as it is muxed (``flush_packets``) and
Ogg pages are cut every 20 ms instead of every second, so the first bytes leave with the first
chunk. M4A (AAC in MP4) needs its index written at the end, so it is for seekable files only.
"""
from __future__ import annotations

import struct
from typing import BinaryIO

import numpy as np

from ttscli.audio_formats import FORMATS, Format, same_audio  # noqa: F401  (callers import them from here)
from ttscli.errors import BackendUnavailableError

MIN_RATE, MAX_RATE = 8000, 48000      # the output rates a caller may ask for


def to_int16(x: np.ndarray) -> np.ndarray:
    return (np.clip(x, -1.0, 1.0) * 32767.0).round().astype("<i2")


def wav_header(sample_rate: int, n_samples: int | None = None) -> bytes:
    """16-bit mono WAV header; unknown length (streaming) uses the 0xFFFFFFFF convention."""
    data = 0xFFFFFFFF if n_samples is None else n_samples * 2
    riff = 0xFFFFFFFF if n_samples is None else 36 + data
    return (
        b"RIFF" + struct.pack("<I", riff) + b"WAVE"
        + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data" + struct.pack("<I", data)
    )


class Encoder:
    """Push float32 mono chunks, get back the bytes ready so far; ``finish`` returns the rest.
    ``samples`` counts the samples taken, at ``sample_rate``."""

    sample_rate: int
    samples: int = 0

    def push(self, chunk: np.ndarray) -> bytes:
        raise NotImplementedError

    def finish(self) -> bytes:
        raise NotImplementedError

    def abandon(self) -> None:
        """Stop without finishing (the output is being thrown away); never raises."""


class PCMEncoder(Encoder):
    def __init__(self, sample_rate: int):
        self.sample_rate = sample_rate
        self.samples = 0

    def push(self, chunk: np.ndarray) -> bytes:
        x = np.asarray(chunk, np.float32).reshape(-1)
        self.samples += len(x)
        return to_int16(x).tobytes()

    def finish(self) -> bytes:
        return b""


class WavEncoder(PCMEncoder):
    """The open-ended header first, then samples; :meth:`header` is the true one for a writer
    that can put it back at the start."""

    def __init__(self, sample_rate: int):
        super().__init__(sample_rate)
        self.started = False

    def _head(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return wav_header(self.sample_rate)

    def push(self, chunk: np.ndarray) -> bytes:
        return self._head() + super().push(chunk)

    def finish(self) -> bytes:
        return self._head()

    def header(self) -> bytes:
        return wav_header(self.sample_rate, self.samples)


class _Collected:
    """The muxer's output: a write-only, unseekable stream whose bytes are taken as they come."""

    def __init__(self):
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def _import_av():
    try:
        import av
    except ImportError as e:
        raise BackendUnavailableError(f"compressed audio needs PyAV ({e}); pip install av, or use wav or pcm") from None
    return av


def check_encoder(fmt: str) -> None:
    """A one-line error if this installation cannot encode ``fmt``."""
    f = FORMATS[fmt]
    if f.codec is None:
        return
    av = _import_av()
    try:
        av.Codec(f.codec, "w")
    except Exception as e:  # noqa: BLE001 - PyAV raises several types for a codec FFmpeg was built without
        raise BackendUnavailableError(f"the installed PyAV's FFmpeg cannot encode {fmt} ({f.codec}: {e}); "
                                      "use wav, pcm or flac") from None


def codec_rate(rates, rate: int) -> int:
    """The rate the encoder runs at: ``rate`` if the codec takes it, else the next higher rate it
    takes (the highest if none is higher). PyAV converts the chunks' rate to it as they come."""
    if not rates or rate in rates:
        return rate
    higher = [r for r in rates if r >= rate]
    return min(higher) if higher else max(rates)


class AVEncoder(Encoder):
    """A compressed format through PyAV. Without ``out`` the bytes are returned by push/finish
    as the muxer writes them; with a seekable ``out`` (a file) the muxer writes there itself and
    can go back to finish its headers (an MP3's Xing frame with the length, FLAC's sample count,
    an M4A's index)."""

    def __init__(self, fmt: str, sample_rate: int, out: BinaryIO | None = None):
        av = _import_av()
        f = FORMATS[fmt]
        self.sample_rate, self.samples = sample_rate, 0
        self._sink = _Collected() if out is None else None
        self._container = av.open(out if out is not None else self._sink, "w", format=f.container,
                                  options=dict(f.muxer_options), container_options={"flush_packets": "1"})
        rate = codec_rate(av.Codec(f.codec, "w").audio_rates, sample_rate)
        self._stream = self._container.add_stream(f.codec, rate=rate)
        self._stream.layout = "mono"
        self._frame_type = av.AudioFrame
        self._pts = 0

    def _mux(self, frame) -> bytes:
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.take() if self._sink is not None else b""

    def push(self, chunk: np.ndarray) -> bytes:
        x = np.ascontiguousarray(np.clip(np.asarray(chunk, np.float32).reshape(1, -1), -1.0, 1.0))
        if x.shape[1] == 0:
            return b""
        frame = self._frame_type.from_ndarray(x, format="flt", layout="mono")
        frame.sample_rate, frame.pts = self.sample_rate, self._pts
        self._pts += x.shape[1]
        self.samples += x.shape[1]
        return self._mux(frame)

    def finish(self) -> bytes:
        tail = self._mux(None)
        self._container.close()
        return tail + (self._sink.take() if self._sink is not None else b"")

    def abandon(self) -> None:
        """Close the muxer now, while its file is still open, rather than when it is collected."""
        try:
            self._container.close()
        except Exception:  # noqa: BLE001 - PyAV/FFmpeg raise many types; the output is thrown away anyway
            pass


class Resampled(Encoder):
    """Chunks at ``in_rate`` converted to ``encoder``'s rate by soxr's streaming resampler, which
    keeps its filter state between chunks: the joins are seamless and the output is what one
    call over the whole signal gives."""

    def __init__(self, encoder: Encoder, in_rate: int):
        import soxr

        self.encoder = encoder
        self.sample_rate = encoder.sample_rate
        self._stream = soxr.ResampleStream(in_rate, encoder.sample_rate, 1, dtype="float32", quality="HQ")

    @property
    def samples(self) -> int:
        return self.encoder.samples

    def push(self, chunk: np.ndarray) -> bytes:
        y = self._stream.resample_chunk(np.asarray(chunk, np.float32).reshape(-1))
        return self.encoder.push(y) if len(y) else b""

    def finish(self) -> bytes:
        y = self._stream.resample_chunk(np.zeros(0, np.float32), last=True)
        return (self.encoder.push(y) if len(y) else b"") + self.encoder.finish()

    def header(self) -> bytes:
        return self.encoder.header()

    def abandon(self) -> None:
        self.encoder.abandon()


def make_encoder(fmt: str, in_rate: int, out_rate: int | None = None, out: BinaryIO | None = None) -> Encoder:
    """The encoder for ``fmt``, taking chunks at ``in_rate`` and writing ``out_rate`` (default:
    the same). ``out``: a seekable file the compressed formats write to directly."""
    rate = out_rate or in_rate
    if fmt == "wav":
        enc: Encoder = WavEncoder(rate)
    elif fmt == "pcm":
        enc = PCMEncoder(rate)
    else:
        enc = AVEncoder(fmt, rate, out)
    return enc if rate == in_rate else Resampled(enc, in_rate)
