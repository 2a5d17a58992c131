"""Pocket TTS rows (the :class:`~ttscli.models.base.RowGenerator` of ``PocketPipeline.rows()``).

:meth:`PocketPipeline._frame_loop <ttscli.models.pocket_tts.pipeline.PocketPipeline._frame_loop>`
for many requests at once: one flow-LM forward per frame over every request (each prefilled
alone on its voice and text, then left-padded into one :class:`ttscli.lm.batch.RowBatch`, so rows
of different prompt lengths keep their own positions), the EOS head over all rows, then the flow
head over all rows with each row's noise drawn from its own seeded key stream, at its own
temperature and clamp; each row then has its own EOS decision, frame limit and Mimi decoder
stream, fed the same groups of frames as the pipeline's decoder thread, so its samples are
those of the same request alone. MLX flow LM only.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from ttscli._blas import one_thread
from ttscli.errors import GenerationError
from ttscli.lm.batch import MemberBatch, RowAudio
from ttscli.lm.cache import KVCache
from ttscli.lm.sample import KeyStream
from ttscli.models.base import Request, Row

from .pipeline import MIN_FRAMES_BEFORE_EOS, decode_sizes, frame_limit, limit_message


@dataclass(frozen=True)
class FlowStack:
    """The flow LM as :class:`~ttscli.lm.batch.RowBatch` steps it: its transformer layers and
    the norm before its heads."""

    layers: list
    norm: Any


class LatentDecoder:
    """One row's Mimi stream: latent frames in, samples out, in the groups
    :meth:`PocketPipeline.generate` hands its decoder thread (``first`` frames, then ``then`` at
    a time), so the stream state and the samples are those of the request alone. The groups run
    on the pipeline's decoding thread as they fill, beside the next batched frames (as one
    generation's do), and their samples are collected once ready; they come out in the
    request's chunks (``first_chunk_frames`` then ``chunk_frames`` frames' worth) when streamed."""

    def __init__(self, pipe, request: Request):
        self.pipe = pipe
        self.pool = pipe.decoder_thread()
        self.stream = pipe.model.mimi.new_stream()
        self.first, self.then = decode_sizes(request)
        self.chunk = max(1, request.chunk_frames) * pipe.args.mimi.frame_samples
        self.head = self.first * pipe.args.mimi.frame_samples
        self.pending: list[mx.array] = []
        self.decoding: deque[Future] = deque()
        self.decodes = 0
        self.ready = np.zeros(0, np.float32)
        self.sent = 0

    def push(self, latent: mx.array) -> list[np.ndarray]:
        self.pending.append(latent)
        if len(self.pending) >= (self.first if self.decodes == 0 else self.then):
            self._submit()
        return self._chunks(wait=False)

    def flush(self) -> np.ndarray | None:
        if self.pending:
            self._submit()
        out = self._chunks(wait=True) + ([self.ready] if len(self.ready) else [])
        self.ready = np.zeros(0, np.float32)
        return np.concatenate(out) if out else None

    def cancel(self) -> None:
        """Nothing of this row's left queued or running on the decoding thread."""
        for f in self.decoding:
            f.cancel()
        wait(self.decoding)
        self.decoding.clear()

    def _submit(self) -> None:
        self.decoding.append(self.pool.submit(self.pipe.decode_chunk, self.pending, self.stream, self.decodes == 0))
        self.pending, self.decodes = [], self.decodes + 1

    def _chunks(self, wait: bool) -> list[np.ndarray]:
        while self.decoding and (wait or self.decoding[0].done()):
            self.ready = np.concatenate([self.ready, self.decoding.popleft().result()])
        out = []
        while len(self.ready) >= (want := self.head if self.sent == 0 else self.chunk):
            out.append(self.ready[:want])
            self.ready, self.sent = self.ready[want:], self.sent + 1
        return out


@dataclass(eq=False)
class PocketRow:
    """One request's side of the batch: its prompt cache until it joins, its settings, key
    stream, frame budget, previous latent and decoder stream."""

    cache: list[KVCache] | None
    tokens: list[int]
    settings: dict[str, Any]
    keys: KeyStream
    limit: int
    audio: RowAudio
    ignore_eos: bool
    latent: mx.array | None = None            # [1, 1, latent]; None: the begin-of-audio frame comes next
    frame: int = 0
    eos_at: int | None = None
    joined: bool = False


class PocketRows:
    def __init__(self, pipe):
        self.pipe = pipe
        lm = pipe.model.flow_lm
        self.lm = lm
        self.rows = MemberBatch(FlowStack(lm.transformer.layers, lm.out_norm))

    # ---- the row protocol
    def start(self, request: Request) -> Row:
        p = self.pipe
        tokens, guess = p.text_tokens(request)
        cache = p.voice_cache(request)
        state = PocketRow(cache, tokens, p.settings(request, guess), KeyStream(request.seed),
                          frame_limit(request, len(tokens)), RowAudio(LatentDecoder(p, request), request.stream),
                          request.ignore_eos)
        return Row(request, state)

    def step(self, rows: Sequence[Row]) -> None:
        by_state = {id(row.state): row for row in rows}
        self._join([row.state for row in rows if not row.state.joined])
        members = list(self.rows.members)
        t = time.perf_counter()
        with one_thread():      # the LM here and Mimi's thread: one core each (see PocketPipeline.generate)
            hidden = self.rows.step(mx.concatenate([self._input(m) for m in members], 0))
            eos = np.array(self.lm.out_eos(hidden)[:, 0])
            latents = self._latents(members, hidden)
            # each row's own array, evaluated here: the decoding thread reads it (an MLX graph
            # runs on the thread whose stream made it)
            per_row = [latents[i:i + 1, None] for i in range(len(members))]
            mx.eval(per_row)
        self.pipe.stats.frame_s.append(time.perf_counter() - t)
        for i, m in enumerate(members):
            row = by_state[id(m)]
            try:
                self._frame(m, row, float(eos[i]), per_row[i])
            except Exception as e:  # noqa: BLE001 - the row fails alone; the engine hands it to its request
                row.done, row.error = True, e
            if row.done:
                self.rows.remove(m)

    def take(self, row: Row) -> np.ndarray | None:
        return row.state.audio.take(row.done)

    def drop(self, row: Row) -> None:
        m = row.state
        m.audio.decoder.cancel()
        self.rows.discard(m)
        m.cache = None

    # ---- the batch
    def _join(self, new: list[PocketRow]) -> None:
        """Prefill each row's text alone on its voice cache, as the pipeline does, and add it
        to the batch; its first frame's input (the begin-of-audio vector) comes with the step."""
        for m in new:
            _, h = self.pipe.code_decoder.prefill(self.lm.text_embeddings(mx.array([m.tokens])), m.cache)
            mx.eval(h, [c.state for c in m.cache])
            self.rows.join(m, [m.cache], [h])
            m.cache, m.joined = None, True

    def _input(self, m: PocketRow) -> mx.array:
        return self.lm.latent_embeddings(m.latent)

    def _latents(self, members: list[PocketRow], hidden: mx.array) -> mx.array:
        """Every row's next latent ``[B, latent]``: its own noise, the flow head over the rows
        that integrate with the same number of steps at once."""
        noise = mx.concatenate([self.pipe.noise(m.keys, m.settings["temperature"], m.settings["noise_clamp"])
                                for m in members], 0)
        groups: dict[int, list[int]] = {}
        for i, m in enumerate(members):
            groups.setdefault(m.settings["steps"], []).append(i)
        if len(groups) == 1:
            return self.pipe.latent(hidden, noise, members[0].settings["steps"])
        out = [None] * len(members)
        for steps, idx in groups.items():
            take = mx.array(idx, dtype=mx.int32)
            got = self.pipe.latent(hidden[take], noise[take], steps)
            for j, i in enumerate(idx):
                out[i] = got[j:j + 1]
        return mx.concatenate(out, 0)

    def _frame(self, m: PocketRow, row: Row, eos_logit: float, latent: mx.array) -> None:
        """This step's frame of one row, decided as ``_frame_loop`` decides it."""
        s, step = m.settings, m.frame
        if eos_logit > s["eos_threshold"] and m.eos_at is None and step >= MIN_FRAMES_BEFORE_EOS \
                and not m.ignore_eos:
            m.eos_at = step
        if m.eos_at is not None and step >= m.eos_at + s["frames_after_eos"]:
            m.audio.flush()
            row.done = True
            return
        m.frame += 1
        m.latent = latent
        self.pipe.stats.frames += 1
        m.audio.push(latent)
        if m.frame >= m.limit:
            if not m.ignore_eos:
                raise GenerationError(limit_message(m.limit))
            m.audio.flush()
            row.done = True


def bench_batch(pipe, sizes: list[int], frames: int, text: str, seed: int = 0, warmup: int = 1) -> dict[str, dict]:
    """``ttscli bench pocket-tts --batch``: ``frames`` frames for each of ``B`` rows at once, per
    size, through :class:`PocketRows` (flow LM, flow head and each row's Mimi decoding: the
    whole of a batched frame). Rows are prefilled when they join, which the wall time includes.
    Random weights never stop, so rows run with ignore_eos."""
    if pipe.rows() is None:
        from ttscli.errors import UsageError

        raise UsageError("--batch needs the MLX flow LM (batched rows share one MLX forward)")
    from ttscli.batching import bench_rows

    return bench_rows(pipe, sizes, frames, text, seed, warmup,
                      frame_seconds=pipe.args.mimi.frame_samples / pipe.sample_rate)
