"""Requests, the chunk scheduler, workers, crossfade and streaming.

The CLI builds a :class:`Request`; :func:`synthesize` splits its text into sentence chunks,
runs them through a :class:`~ttscli.models.base.Pipeline` and yields float32 audio in order.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Request:
    text: str
    voice: str | None = None                 # preset speaker name, or a saved voice file (.safetensors)
    instruct: str | None = None              # style instruction / voice description
    language: str | None = None              # "auto" when None
    ref_audio: np.ndarray | None = None      # clone: mono float32 reference, already at ref_sample_rate
    ref_sample_rate: int | None = None
    ref_text: str | None = None              # clone: transcript of the reference (in-context mode)
    x_vector_only: bool = False              # clone: speaker embedding only, no reference codes
    save_voice: Path | None = None           # clone: store the voice prompt here
    seed: int | None = None
    speed: float = 1.0
    max_frames: int | None = None            # None: the model's default
    stream: bool = False
    first_chunk_frames: int = 3
    chunk_frames: int = 25
    sampling: dict[str, Any] = field(default_factory=dict)   # overrides of the model's defaults
    extra: dict[str, Any] = field(default_factory=dict)      # family-specific knobs

    def for_chunk(self, text: str) -> "Request":
        return replace(self, text=text)


@dataclass
class Stats:
    """Timings a pipeline records while generating (bench reads them). Seconds unless noted."""

    prefill_tokens: int = 0
    prefill_s: float = 0.0
    step_s: list[float] = field(default_factory=list)        # talker step per frame
    frame_s: list[float] = field(default_factory=list)       # full frame (talker + helpers)
    decoder_s: float = 0.0
    decoder_frames: int = 0
    frames: int = 0
    first_audio_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
