"""Streaming speech decode: audio after the first few frames, then every ``chunk_frames``.

Re-decoding each chunk with a few frames of left context cannot equal a one-shot decode: the
transformer's receptive field is layers * (window - 1) = 568 frames for the released decoder.
Instead every chunk continues one :class:`~.decoder.DecoderCache` (conv input tails and the
transformer's sliding-window keys/values), so chunk k's samples are exactly the samples a
one-shot decode gives for those frames, and no context audio is computed or thrown away.
"""
from __future__ import annotations

import time
from typing import Iterable, Iterator

import mlx.core as mx
import numpy as np

from .decoder import SpeechDecoder


class StreamingDecoder:
    """Feed codes frame by frame (``push``), get float32 audio chunks back; ``flush`` at the end.

    ``kv_capacity`` (e.g. 256) makes the decoder transformer use a fixed number of KV slots and
    re-prime when full, from the last ``reprime_frames`` frames (default ``window - 1``; see
    transformer.py); None (default) keeps a rolling sliding window. Both equal a one-shot decode.
    """

    def __init__(self, decoder: SpeechDecoder, first_chunk_frames: int = 3, chunk_frames: int = 25,
                 kv_capacity: int | None = None, reprime_frames: int | None = None):
        if first_chunk_frames < 1 or chunk_frames < 1:
            raise ValueError("streaming chunk sizes must be at least one frame")
        self.decoder = decoder
        self.first_chunk_frames = first_chunk_frames
        self.chunk_frames = chunk_frames
        self.cache = decoder.make_cache(kv_capacity, reprime_frames)
        self._pending: list[np.ndarray] = []
        self._pending_frames = 0
        self.chunks = 0

    @property
    def frames(self) -> int:
        """Frames decoded so far (audio emitted = frames * samples_per_frame)."""
        return self.cache.frames

    @property
    def reprimes(self) -> int:
        return self.cache.reprimes

    def prime(self, codes) -> None:
        """Use ``[n, Q]`` frames as left context only (voice-clone reference codes): no audio.

        Call before the first ``push``. The generated frames then decode exactly as upstream's
        one-pass decode of ``cat(reference, generated)`` with the reference audio cut off.
        """
        if self.frames or self._pending_frames:
            raise RuntimeError("prime() must come before the first pushed frame")
        codes = np.asarray(codes)
        if codes.shape[0]:
            self.decoder.prime(mx.array(np.maximum(codes, 0).astype(np.int32)), self.cache)

    def _next_size(self) -> int:
        return self.first_chunk_frames if self.chunks == 0 else self.chunk_frames

    def push(self, codes) -> list[np.ndarray]:
        """Add ``[n, Q]`` (or one ``[Q]``) frames; return the audio chunks that became ready."""
        codes = np.asarray(codes)
        if codes.ndim == 1:
            codes = codes[None]
        q, size = self.decoder.args.num_quantizers, self.decoder.args.codebook_size
        if codes.ndim != 2 or codes.shape[1] != q:
            raise ValueError(f"streaming decoder expects frames of {q} codes, got shape {list(codes.shape)}")
        if codes.size and (codes.min() < 0 or codes.max() >= size):
            raise ValueError(f"code out of range [0, {size}) in streamed frame")
        self._pending.append(codes.astype(np.int32))
        self._pending_frames += codes.shape[0]
        ready = []
        while self._pending_frames >= self._next_size():
            ready.append(self._decode(self._take(self._next_size())))
        return ready

    def flush(self) -> np.ndarray | None:
        """Decode whatever is left (fewer frames than a chunk); None if nothing is pending."""
        if not self._pending_frames:
            return None
        return self._decode(self._take(self._pending_frames))

    def _take(self, n: int) -> np.ndarray:
        allc = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        head, rest = allc[:n], allc[n:]
        self._pending = [rest] if rest.shape[0] else []
        self._pending_frames = rest.shape[0]
        return head

    def _decode(self, codes: np.ndarray) -> np.ndarray:
        wav = self.decoder(mx.array(codes), self.cache)
        mx.eval(wav, self.cache.transformer.state())
        self.chunks += 1
        return np.array(wav.astype(mx.float32))


def stream_decode(decoder: SpeechDecoder, frames: Iterable, first_chunk_frames: int = 3,
                  chunk_frames: int = 25, kv_capacity: int | None = None,
                  reprime_frames: int | None = None) -> Iterator[np.ndarray]:
    """Generator form: consume frames (each ``[Q]`` or ``[n, Q]``), yield audio chunks as they are ready."""
    s = StreamingDecoder(decoder, first_chunk_frames, chunk_frames, kv_capacity, reprime_frames)
    for f in frames:
        yield from s.push(f)
    tail = s.flush()
    if tail is not None:
        yield tail


def decode_timed(sd: StreamingDecoder, frames: Iterable, stream: bool, stats, t0: float) -> Iterator[np.ndarray]:
    """A pipeline's decode of its generated frames through ``sd``: every chunk as it is ready when
    ``stream``, else the whole utterance once at the end. Adds decode time to ``stats.decoder_s``,
    sets ``stats.decoder_frames`` (= ``stats.frames``) and ``stats.first_audio_s`` (from ``t0``)."""
    def first():
        if stats.first_audio_s is None:
            stats.first_audio_s = time.perf_counter() - t0

    collected = []
    for codes in frames:
        td = time.perf_counter()
        chunks = sd.push(codes)
        stats.decoder_s += time.perf_counter() - td
        for c in chunks:
            if stream:
                first()
                yield c
            else:
                collected.append(c)
    td = time.perf_counter()
    tail = sd.flush()
    stats.decoder_s += time.perf_counter() - td
    stats.decoder_frames = stats.frames
    if tail is not None and len(tail):
        if stream:
            first()
            yield tail
        else:
            collected.append(tail)
    if not stream:
        first()
        yield np.concatenate(collected) if collected else np.zeros(0, np.float32)
