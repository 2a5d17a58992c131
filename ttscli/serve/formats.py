"""Response audio formats: OpenAI's six, each encoded chunk by chunk (:mod:`ttscli.encode`).

Every format streams from the first chunk. WAV is the one whose header holds sizes: a streamed
WAV (``"stream": true`` or SSE) carries the open-ended sizes 0xFFFFFFFF, and a WAV sent whole
(the default) gets the true ones, since the body is complete before it is sent. Audio is
resampled to the response's rate (24 kHz unless the request's ``sample_rate`` says otherwise,
OpenAI's rate) by soxr's streaming resampler, so the chunks join without seams.
"""
from __future__ import annotations

from ttscli.encode import FORMATS, check_encoder
from ttscli.errors import UsageError

RESPONSE_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")   # OpenAI's response_format values
DEFAULT_RATE = 24000             # OpenAI's rate: a client that assumes it plays at the right speed


def check_format(fmt: str) -> str:
    """The format name if this machine can write it; a one-line error otherwise."""
    fmt = str(fmt).lower()
    if fmt not in RESPONSE_FORMATS:
        raise UsageError(f"unknown response_format {fmt!r}; use one of {', '.join(RESPONSE_FORMATS)}")
    check_encoder(fmt)
    return fmt


def content_type(fmt: str) -> str:
    return FORMATS[fmt].content_type

