"""The output formats ttscli writes, by name: what each is (content type, extension, PyAV's muxer
and encoder). Kept apart from :mod:`ttscli.encode` so that the CLI can name them in its help
without importing numpy (``ttscli --help`` stays light)."""
from __future__ import annotations

from dataclasses import dataclass

OGG_PAGE_US = 20000                   # one Opus packet per Ogg page: pages leave as they are made


@dataclass(frozen=True)
class Format:
    """An output format: ``container`` and ``codec`` name PyAV's muxer and encoder (None: written
    here); ``seekable``: the muxer must seek back, so it cannot stream."""

    name: str
    content_type: str
    extension: str
    container: str | None = None
    codec: str | None = None
    seekable: bool = False
    muxer_options: tuple[tuple[str, str], ...] = ()

    @property
    def streams(self) -> bool:
        return not self.seekable


_OGG = (("page_duration", str(OGG_PAGE_US)),)
FORMATS = {f.name: f for f in (
    Format("wav", "audio/wav", "wav"),
    Format("pcm", "audio/pcm", "pcm"),
    Format("flac", "audio/flac", "flac", "flac", "flac"),
    Format("mp3", "audio/mpeg", "mp3", "mp3", "libmp3lame"),
    Format("opus", "audio/ogg", "opus", "ogg", "libopus", muxer_options=_OGG),
    Format("ogg", "audio/ogg", "ogg", "ogg", "libopus", muxer_options=_OGG),
    Format("aac", "audio/aac", "aac", "adts", "aac"),
    Format("m4a", "audio/mp4", "m4a", "ipod", "aac", seekable=True),
)}


def same_audio(a: str, b: str) -> bool:
    """Whether two format names write the same kind of file (``ogg`` and ``opus`` are both Ogg Opus)."""
    fa, fb = FORMATS[a], FORMATS[b]
    return a == b or (fa.container is not None and (fa.container, fa.codec) == (fb.container, fb.codec))
