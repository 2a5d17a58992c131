"""The contract between the engine and a model family.

Each family package ``ttscli.models.<family>`` exposes
``load_pipeline(spec: ModelSpec, checkpoint: Path, options: LoadOptions) -> Pipeline``.
A pipeline turns one :class:`~ttscli.generate.Request` into float32 mono audio chunks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol, runtime_checkable

import numpy as np


@dataclass
class LoadOptions:
    dtype: str | None = None                 # "float32" | "float16" | "bfloat16"; None: the family default
    code_decoder_backend: str = "mlx"        # "mlx" | "coreml"
    random_weights: bool = False             # build at real dimensions with random weights (bench)
    extra: dict = field(default_factory=dict)


@runtime_checkable
class Pipeline(Protocol):
    sample_rate: int
    max_chunk_chars: int                     # sentence-chunk budget for long text

    def generate(self, request: "Request") -> Iterator[np.ndarray]:
        """Yield float32 mono chunks at ``sample_rate`` for ONE text chunk (already split).

        Yield more than once only when ``request.stream`` is set or the family streams naturally.
        Raise ttscli.errors classes for anything the user must hear about.
        """
        ...


from ttscli.generate import Request  # noqa: E402  (type only)
