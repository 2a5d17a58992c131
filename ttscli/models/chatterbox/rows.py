"""Chatterbox rows (the :class:`~ttscli.models.base.RowGenerator` of ``ChatterboxPipeline.rows()``).

T3's token loop (:meth:`ttscli.models.chatterbox.t3.T3.generate`) for many requests at once: one
backbone forward per token over every request's rows (one, or CFG's conditional and
text-zeroed rows, each request prefilled alone and left-padded into one
:class:`ttscli.lm.batch.RowBatch`), then per request its guided draw with its own key stream,
repetition-penalty set, speech positions and stop. Each request's tokens go to S3Gen as the
pipeline sends them: all at once when the request ends (one-shot), or in chunks of
``first_chunk_frames``, ``chunk_frames``, then doubling hops of speech codes through its own
:class:`~ttscli.codecs.s3gen.S3GenStream` (streamed). A request's tokens equal those of the same
request alone with the same seed, up to the rounding of batched matmuls. MLX T3 only.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import numpy as np

from ttscli.codecs.s3gen import hop_tokens
from ttscli.errors import LimitReached
from ttscli.lm.batch import MemberBatch, take_pieces
from ttscli.lm.sample import NEG_INF, KeyStream
from ttscli.models.base import Request, Row
from ttscli.models.chatterbox.pipeline import SAMPLE_RATE, SPEECH_CODES, s3gen_key, speech_tokens
from ttscli.models.chatterbox.t3 import draw, limit_message
from ttscli.models.chatterbox.tokenizer import punc_norm


@dataclass(eq=False)
class T3Row:
    """One request's T3 state and what its tokens become."""

    request: Request
    conds: Any
    embeds: mx.array                          # the prefill, [rows, T, D] (2 rows with CFG)
    sampling: Any                             # T3Sampling
    keys: KeyStream
    seen: mx.array
    limit: int
    first: int                                # speech codes in a stream's first chunk
    watermarker: Any = None
    tokens: list[int] = field(default_factory=list)
    stream: Any = None                        # S3GenStream of a streamed request
    buf: list[int] = field(default_factory=list)
    sent: int = 0                             # stream chunks sent to S3Gen
    audio: list[np.ndarray] = field(default_factory=list)


class ChatterboxRows:
    def __init__(self, pipe):
        self.pipe = pipe
        self.t3 = pipe.t3
        self.rows = MemberBatch(self.t3.tfmr)   # a CFG member owns two batch rows

    # ---- the row protocol
    def start(self, request: Request) -> Row:
        from ttscli.codecs.s3gen import S3GenStream
        from ttscli.models.chatterbox.pipeline import perth_watermarker

        p, a = self.pipe, self.t3.args
        mark = bool(request.knobs.get("watermark", False))
        if mark and request.stream:
            from ttscli.errors import UsageError

            raise UsageError("--watermark marks a whole utterance; it cannot be combined with --stream")
        first = p.first_chunk(request) if request.stream else 0
        conds = p.conditionals(request)
        s = p.sampling(request)
        ids = p.tokenizer.encode(punc_norm(request.text))
        embeds = self.t3.prefill_embeds(conds.t3_cond(request.knobs.get("exaggeration", 0.5)), ids,
                                        s.cfg_weight > 0.0)
        seen = mx.zeros((1, a.speech_vocab), dtype=mx.bool_)
        seen[0, a.start_speech_token] = True
        m = T3Row(request, conds, embeds, s, KeyStream(request.seed), seen,
                  min(s.max_new_tokens, a.max_speech_tokens + 2), first,
                  perth_watermarker() if mark else None)
        if request.stream:
            m.stream = S3GenStream(p.s3gen, conds.gen, key=s3gen_key(request))
        return Row(request, m)

    def step(self, rows: Sequence[Row]) -> None:
        by_state = {id(row.state): row for row in rows}
        self._join([row.state for row in rows if row.state not in self.rows.members])
        logits = self.t3.speech_head(self.rows.hidden).astype(mx.float32)
        spans = self.rows.spans()
        embeds, ended = [], []
        for m in self.rows.members:
            row = by_state[id(m)]
            lo, hi = spans[id(m)]
            try:
                e = self._token(m, logits[lo:hi])
                if e is None:
                    self._finish(m)
                    row.done = True
            except Exception as err:  # noqa: BLE001 - the row fails alone; the engine hands it to its request
                row.done, row.error = True, err
            if row.done:
                ended.append(m)
            else:
                embeds.append(mx.broadcast_to(e, (hi - lo, *e.shape[1:])))
        for m in ended:
            self.rows.remove(m)
        if embeds:
            self.rows.step(mx.concatenate(embeds, 0))

    def take(self, row: Row) -> np.ndarray | None:
        return take_pieces(row.state.audio)

    def drop(self, row: Row) -> None:
        self.rows.discard(row.state)

    # ---- the batch
    def _join(self, new: list[T3Row]) -> None:
        for m in new:
            c = self.t3.new_cache()
            _, h = self.t3(m.embeds, c)
            self.rows.join(m, [c], [h])

    # ---- one request's token, as T3.generate draws it
    def _token(self, m: T3Row, logits: mx.array) -> mx.array | None:
        """Draw the next token; its embedding ``[1, 1, D]`` for the next step, or None when the
        request ended (its stop token, or its limit under ignore_eos). Past the limit: GenerationError."""
        a, s = self.t3.args, m.sampling
        if s.cfg_weight > 0.0:
            logits = logits[0:1] + mx.array(s.cfg_weight, dtype=mx.float32) * (logits[0:1] - logits[1:2])
        if m.request.ignore_eos:
            logits = mx.where(mx.arange(a.speech_vocab) == a.stop_speech_token, NEG_INF, logits)
        tok = draw(logits, s.params(), m.seen, m.keys.next())
        t = int(tok.item())
        if t == a.stop_speech_token:
            return None
        m.tokens.append(t)
        m.seen[0, t] = True
        self._stream_token(m, t)
        if len(m.tokens) >= m.limit:
            if m.request.ignore_eos:
                return None
            raise LimitReached(limit_message(m.limit, self.t3.args.max_speech_tokens + 2))
        return self.t3.speech_embed(tok, len(m.tokens))

    def _stream_token(self, m: T3Row, t: int) -> None:
        """A streamed request's chunks, as ChatterboxPipeline._stream makes them."""
        if m.stream is None:
            return
        if t < SPEECH_CODES:
            m.buf.append(t)
        if len(m.buf) >= hop_tokens(m.first, m.request.chunk_frames, m.sent):
            self._send(m, last=False)

    def _send(self, m: T3Row, last: bool) -> None:
        piece = m.stream.push(np.asarray(m.buf, np.int64), last)
        m.buf, m.sent = [], m.sent + 1
        if piece is not None and len(piece):
            m.audio.append(np.asarray(piece, np.float32))

    def _finish(self, m: T3Row) -> None:
        """The request's tokens are all drawn: the final S3Gen pass, or the one-shot decode."""
        if m.stream is not None:
            self._send(m, last=True)
            return
        toks = speech_tokens(m.tokens)
        wav = np.asarray(self.pipe.s3gen.generate(toks, m.conds.gen, key=s3gen_key(m.request)), np.float32)
        if m.watermarker is not None:
            wav = np.asarray(m.watermarker.apply_watermark(wav, sample_rate=SAMPLE_RATE), np.float32)
        m.audio.append(wav)
