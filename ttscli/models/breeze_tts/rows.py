"""Breeze TTS 2 rows (the :class:`~ttscli.models.base.RowGenerator` of ``BreezePipeline.rows()``).

The frame of :func:`ttscli.models.breeze_tts.loop.generate_frames` for many requests at once:
one backbone forward per frame over every branch of every request (a request is one row, or
CFG's conditional and unconditional rows, each with its own prompt, positions and cache,
left-padded into one :class:`ttscli.lm.batch.RowBatch`), then per request its guided codebook-0
draw (its own key stream, repetition-penalty set and stop) and its depth decoder pass (the
request's CFG rows as a batch of two, as alone), and its own speech decoder stream. A request's
codes equal those of the same request alone with the same seed, up to the rounding of batched
matmuls. MLX backbone only.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ttscli.errors import GenerationError, LimitReached
from ttscli.lm.batch import MemberBatch, RowAudio
from ttscli.lm.sample import KeyStream, logit_bias, sample
from ttscli.models.base import Request, Row
from ttscli.models.breeze_tts.family import FAMILY
from ttscli.models.breeze_tts.loop import LoopConfig, check_context
from ttscli.models.breeze_tts.prompt import Prompt, prompts


@dataclass(eq=False)
class BreezeRow:
    """One request's side of the batch: its prompts (two with CFG), loop settings, key stream,
    penalty set and decoder stream."""

    prompts: list[Prompt]
    scale: float | None
    cfg: LoopConfig
    keys: KeyStream
    audio: RowAudio
    seen: mx.array
    frames: int = 0


class BreezeRows:
    def __init__(self, pipe):
        self.pipe = pipe
        self.model = pipe.model
        a = self.model.args
        self.V, self.eos = a.vocab_size, a.eos_id
        reserved = range(a.codebook_size, self.V)
        self.bias0 = {flag: logit_bias(self.V + 1, [*reserved, *([self.eos] if flag else [])])[None]
                      for flag in (False, True)}
        self.bias_d = logit_bias(self.V, reserved)[None]
        self.vocab = mx.arange(self.V + 1)[None]
        self.rows = MemberBatch(self.model.backbone_model)   # a CFG member owns two batch rows

    # ---- the row protocol
    def start(self, request: Request) -> Row:
        p = self.pipe
        cfg = p.loop_config(request)
        cond, uncond, scale = prompts(self.model, p.tokenizer, request.text, request.instruct, p.voice(request),
                                      p.cfg_scale(request))
        check_context(self.model, cond, uncond, cfg.max_frames)
        from ttscli.codecs.qwen3_12hz.streaming import StreamingDecoder

        if request.stream:
            sd = StreamingDecoder(p.speech_decoder, FAMILY.first_chunk(request.first_chunk_frames),
                                  max(1, request.chunk_frames))
        else:
            sd = StreamingDecoder(p.speech_decoder, 50, 50)
        state = BreezeRow([x for x in (cond, uncond) if x is not None], scale, cfg, KeyStream(request.seed),
                          RowAudio(sd, request.stream), mx.zeros((1, self.V + 1), dtype=mx.bool_))
        return Row(request, state)

    def step(self, rows: Sequence[Row]) -> None:
        by_state = {id(row.state): row for row in rows}
        self._join([row.state for row in rows if row.state not in self.rows.members])
        logits = self.model.head(self.rows.hidden)
        spans = self.rows.spans()
        going, embeds, ended = [], [], []
        for m in self.rows.members:
            row = by_state[id(m)]
            lo, hi = spans[id(m)]
            try:
                codes = self._frame(m, self._guide(m, logits[lo:hi]), self.rows.hidden[lo:hi])
                if codes is None:
                    m.audio.flush()
                    row.done = True
                    ended.append(m)
                    continue
                m.frames += 1
                m.audio.push(np.array(codes[0]))
            except Exception as e:  # noqa: BLE001 - the row fails alone; the engine hands it to its request
                row.done, row.error = True, e
                ended.append(m)
                continue
            going.append(m)
            e = self.model.embed_frames(codes)[:, None, :]
            embeds.append(mx.broadcast_to(e, (hi - lo, *e.shape[1:])))
        for m in ended:
            self.rows.remove(m)
        if not going:
            return
        self.rows.step(mx.concatenate(embeds, 0))
        for m in [m for m in going if m.frames >= m.cfg.max_frames]:
            row = by_state[id(m)]
            lo, hi = self.rows.spans()[id(m)]
            row.done, row.error = True, self._overrun(m, self._guide(m, self.model.head(self.rows.hidden[lo:hi])))
            if row.error is None:
                m.audio.flush()
            self.rows.remove(m)

    def take(self, row: Row) -> np.ndarray | None:
        return row.state.audio.take(row.done)

    def drop(self, row: Row) -> None:
        self.rows.discard(row.state)

    # ---- the batch
    def _join(self, new: list[BreezeRow]) -> None:
        """Prefill each branch alone (as :class:`~ttscli.models.breeze_tts.loop.Branches` does
        for CFG) and merge the caches into the batch."""
        for m in new:
            caches, hidden = [], []
            for p in m.prompts:
                c = self.model.new_cache()
                _, h = self.model(p.embeds, c)
                mx.eval(h, [x.state for x in c])
                caches.append(c)
                hidden.append(h)
            self.rows.join(m, caches, hidden)

    # ---- one request's frame, as the single loop makes it
    @staticmethod
    def _guide(m: BreezeRow, z: mx.array) -> mx.array:
        return z if m.scale is None else z[1:2] + m.scale * (z[0:1] - z[1:2])

    def _seen(self, m: BreezeRow) -> mx.array | None:
        return m.seen if m.cfg.backbone.repetition_penalty != 1.0 else None

    def _frame(self, m: BreezeRow, logits: mx.array, hidden: mx.array) -> mx.array | None:
        """``codes [1, 16]`` of the next frame, or None at EOS."""
        k = m.keys.take(16)
        c0 = sample(logits, m.cfg.backbone, k[0], seen=self._seen(m), bias=self.bias0[m.cfg.ignore_eos])
        if int(c0.item()) == self.eos:
            return None

        def pick(z, j, k=k):
            return sample(z, m.cfg.depth, k[j], bias=self.bias_d)

        rest, _ = self.model.depth_frame(hidden, c0, pick, m.scale)
        m.seen = mx.logical_or(m.seen, self.vocab == c0[:, None])
        return mx.concatenate([c0[:, None], rest], axis=1)

    def _overrun(self, m: BreezeRow, logits: mx.array) -> GenerationError | None:
        """A request at ``max_frames``: whole if EOS is next (as the single loop decides)."""
        if m.cfg.ignore_eos:
            return None
        last = sample(logits, m.cfg.backbone, m.keys.next(), seen=self._seen(m), bias=self.bias0[False])
        if int(last.item()) == self.eos:
            return None
        return LimitReached(f"reached --max-frames {m.cfg.max_frames} ({m.cfg.max_frames / 12.5:.1f} s of audio) "
                               "before the end of speech; raise --max-frames or shorten the text chunk")
