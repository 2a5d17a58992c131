"""S3Gen: Chatterbox's speech tokens -> 24 kHz audio, and the reference front ends it needs.

The interface the Chatterbox family calls (``family.py`` / ``pipeline.py``):

* :func:`load_s3gen` reads ``s3gen.safetensors`` (the published ``S3Token2Wav`` layout:
  ``flow.*``, ``mel2wav.*``, ``speaker_encoder.*``, ``tokenizer.*``) into an :class:`S3Gen`.
* :meth:`S3Gen.embed_ref` turns a reference recording into the conditioning upstream's
  ``S3Token2Mel.embed_ref`` returns (prompt tokens, prompt mel, CAMPPlus x-vector).
* :meth:`S3Gen.tokenize` gives the S3 speech tokens of a 16 kHz recording (T3's prompt tokens).
* :meth:`S3Gen.generate` runs flow (conformer encoder + causal CFM) and HiFT on speech tokens.
* :meth:`S3Gen.stream` yields the same audio in pieces as tokens arrive in chunks.

Everything runs in float32 unless ``dtype`` says otherwise; arrays in and out are numpy.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ttscli.errors import NotImplementedModelError

SAMPLE_RATE = 24000          # S3Gen output and prompt-mel rate
S3_SR = 16000                # S3 tokenizer and CAMPPlus input rate
TOKEN_RATE = 25              # speech tokens per second
SAMPLES_PER_TOKEN = SAMPLE_RATE // TOKEN_RATE   # 960
DEC_COND_LEN = 10 * SAMPLE_RATE                  # upstream keeps at most 10 s of reference

_PENDING = "Chatterbox S3Gen: {} is not implemented yet"


class S3Gen:
    """Speech tokens -> 24 kHz waveform (flow + HiFT), plus the reference front ends.

    Built by :func:`load_s3gen`; holds the MLX modules ``flow``, ``mel2wav`` (HiFT),
    ``speaker_encoder`` (CAMPPlus) and ``tokenizer`` (S3TokenizerV2) named as in the checkpoint.
    """

    sample_rate = SAMPLE_RATE

    def embed_ref(self, wav: np.ndarray, sample_rate: int) -> dict:
        """Conditioning from a reference recording, as upstream ``embed_ref``.

        ``wav``: mono float32 at ``sample_rate`` (any rate; resampled to 24 kHz and, inside, to
        16 kHz as the reference does). Only the first 10 s are used.

        Returns a dict of numpy arrays: ``prompt_token`` int32 ``[1, T_tok]``,
        ``prompt_token_len`` int32 ``[1]``, ``prompt_feat`` float32 ``[1, 2*T_tok, 80]``
        (log-mel of the 24 kHz reference), ``embedding`` float32 ``[1, 192]`` (CAMPPlus x-vector).
        """
        raise NotImplementedModelError(_PENDING.format("embed_ref"))

    def tokenize(self, wav16k: np.ndarray, max_tokens: int | None = None) -> np.ndarray:
        """S3 speech tokens (int32 ``[T_tok]``, 25 Hz, values < 6561) of a mono 16 kHz float32
        recording; ``max_tokens`` truncates as upstream's ``max_len`` does (T3 uses 150)."""
        raise NotImplementedModelError(_PENDING.format("tokenize"))

    def generate(self, tokens: np.ndarray, ref: dict, *, n_timesteps: int = 10,
                 noise: np.ndarray | None = None) -> np.ndarray:
        """24 kHz float32 waveform ``[T_tok * 960]`` of speech ``tokens`` (int, ``[T_tok]``,
        values < 6561) in the voice of ``ref`` (from :meth:`embed_ref`).

        ``n_timesteps`` Euler steps of the CFM on the cosine schedule with CFG 0.7.
        ``noise``: the CFM's starting noise ``[1, 80, T_mel_total]`` (prompt + generated mel
        frames); None draws it from MLX's generator (upstream draws ``randn`` the same shape).
        Upstream's trim-fade of the first 40 ms is applied.
        """
        raise NotImplementedModelError(_PENDING.format("generate"))

    def stream(self, token_chunks: Iterable[np.ndarray], ref: dict, *, n_timesteps: int = 10,
               noise: np.ndarray | None = None) -> Iterator[np.ndarray]:
        """Yield 24 kHz float32 audio pieces as chunks of speech tokens arrive.

        The concatenation of the pieces equals :meth:`generate` on the concatenated tokens
        within the tolerance stated (and tested) in ``tests/chatterbox/s3gen``.
        """
        raise NotImplementedModelError(_PENDING.format("stream"))


def load_s3gen(path: Path | None, dtype: str = "float32", random_weights: bool = False) -> S3Gen:
    """An :class:`S3Gen` from ``path`` (``s3gen.safetensors`` or the folder holding it).

    ``random_weights=True`` (``path`` may then be None) builds the real-size model with
    random weights, for benchmarks and tests that need no checkpoint.
    A missing or mis-shaped tensor is one :class:`ttscli.errors.CheckpointError` line.
    """
    raise NotImplementedModelError(_PENDING.format("load_s3gen"))
