"""Response audio formats: which the installed codecs can write, and how each is sent.

WAV and raw PCM stream as they are generated (WAV with the streaming header whose sizes read
0xFFFFFFFF, as `ttscli speak -o -` writes). Compressed formats go through libsndfile, which
needs the whole signal to finish its headers, so they are sent once generation has ended.
"""
from __future__ import annotations

import io

import numpy as np

from ttscli.audio import to_int16, wav_header
from ttscli.errors import BackendUnavailableError, UsageError

# OpenAI's response_format -> (libsndfile major, subtype, content type); None: written here
FORMATS = {
    "mp3": ("MP3", "MPEG_LAYER_III", "audio/mpeg"),
    "opus": ("OGG", "OPUS", "audio/ogg"),
    "aac": (None, None, "audio/aac"),
    "flac": ("FLAC", "PCM_16", "audio/flac"),
    "wav": (None, None, "audio/wav"),
    "pcm": (None, None, "audio/pcm"),
}
STREAMED = ("wav", "pcm")
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def check_format(fmt: str) -> str:
    """The format name if this machine can write it; a one-line error otherwise."""
    fmt = str(fmt).lower()
    if fmt not in FORMATS:
        raise UsageError(f"unknown response_format {fmt!r}; use one of {', '.join(FORMATS)}")
    if fmt in STREAMED:
        return fmt
    major, subtype, _ = FORMATS[fmt]
    import soundfile as sf

    if major is None or major not in sf.available_formats() or subtype not in sf.available_subtypes(major):
        usable = [f for f in FORMATS if f in STREAMED or _writable(f)]
        raise BackendUnavailableError(f"the installed libsndfile {sf.__libsndfile_version__} cannot write {fmt}; "
                                      f"use {', '.join(usable)}")
    return fmt


def _writable(fmt: str) -> bool:
    import soundfile as sf

    major, subtype, _ = FORMATS[fmt]
    return major is not None and major in sf.available_formats() and subtype in sf.available_subtypes(major)


def content_type(fmt: str) -> str:
    return FORMATS[fmt][2]


class Encoder:
    """Turns float32 chunks into the bytes of one response: ``add`` per chunk, then ``finish``."""

    def __init__(self, fmt: str, sample_rate: int):
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.samples = 0
        self._held: list[np.ndarray] = []
        self._started = False

    def add(self, chunk: np.ndarray) -> bytes:
        x = np.asarray(chunk, np.float32).reshape(-1)
        self.samples += len(x)
        if self.fmt not in STREAMED:
            self._held.append(x)
            return b""
        head = b""
        if not self._started and self.fmt == "wav":
            head = wav_header(self.sample_rate)
        self._started = True
        return head + to_int16(x).tobytes()

    def finish(self) -> bytes:
        if self.fmt in STREAMED:
            return b"" if self._started or self.fmt == "pcm" else wav_header(self.sample_rate, 0)
        import soundfile as sf

        x = np.concatenate(self._held) if self._held else np.zeros(0, np.float32)
        rate = self.sample_rate
        if self.fmt == "opus" and rate not in OPUS_RATES:
            from ttscli.audio import resample

            x, rate = resample(x, rate, 48000), 48000
        major, subtype, _ = FORMATS[self.fmt]
        buf = io.BytesIO()
        with sf.SoundFile(buf, "w", samplerate=rate, channels=1, format=major, subtype=subtype) as f:
            f.write(np.clip(x, -1.0, 1.0))
        return buf.getvalue()
