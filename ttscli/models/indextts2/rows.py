"""IndexTTS2 rows (the :class:`~ttscli.models.base.RowGenerator` of ``IndexTTS2Pipeline.rows()``).

The GPT's code loop for many requests at once. A request owns as many consecutive rows of one
:class:`ttscli.lm.batch.MemberBatch` as it has beams (one when it samples a single row): each of
its text segments is prefilled alone (its own conditioning, emotion and text, any length), its
beams joining the batch as copies of that prefill; then one GPT-2 forward and one
``final_norm`` + ``mel_head`` over every row per step, and per request the step of its own
:class:`~ttscli.models.indextts2.gpt.BeamSearch` (or :class:`~ttscli.models.indextts2.gpt.SampleSearch`)
with its own PRNG keys, penalties, forced length and limit, the same search the single loop
runs. Surviving beams are reordered inside the request's rows, every request's in one pass
over the caches. When a segment's search ends, its best codes go through the latent, S2Mel and
BigVGAN (:meth:`~ttscli.models.indextts2.pipeline.IndexTTS2Pipeline.decode`), the request leaves
the batch and rejoins with its next segment's prefill, after upstream's 200 ms pause. So a row's
audio is that of the same request alone with the same seed, up to the rounding of batched
matmuls, a segment at a time as the request streams alone.
"""
from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from ttscli.lm.batch import MemberBatch, take_pieces
from ttscli.lm.gpt2 import select_rows
from ttscli.lm.sample import KeyStream
from ttscli.models.base import Request, Row
from ttscli.models.indextts2.gpt import BeamSearch, SampleSearch
from ttscli.models.indextts2.pipeline import Plan, silence


@dataclass(eq=False)
class GPTRow:
    """One request: its plan, its key stream, the segment being decoded and its audio so far."""

    request: Request
    plan: Plan
    keys: KeyStream
    segment: int = 0
    embeds: mx.array | None = None            # the segment's prompt [1, L, D] (without the start code)
    search: BeamSearch | SampleSearch | None = None
    codes: list[int] = field(default_factory=list)    # a sampled row's codes so far
    audio: list[np.ndarray] = field(default_factory=list)


class IndexTTS2Rows:
    def __init__(self, pipe):
        self.pipe = pipe
        self.gpt = pipe.gpt
        # the batch steps the GPT-2 blocks and ln_f; final_norm and mel_head are applied here
        self.rows = MemberBatch(types.SimpleNamespace(layers=self.gpt.gpt.h, norm=self.gpt.gpt.ln_f))
        self.waiting: list[GPTRow] = []            # a segment to prefill before the next step

    # ---- the row protocol
    def start(self, request: Request) -> Row:
        m = GPTRow(request, self.pipe.plan(request), KeyStream(request.seed))
        self._begin(m)
        return Row(request, m)

    def step(self, rows: Sequence[Row]) -> None:
        by_state = {id(row.state): row for row in rows}
        for m in [m for m in self.waiting if id(m) in by_state]:
            self._join(m)
        if not self.rows.members:
            return
        gpt = self.gpt
        logits = gpt.mel_head(gpt.final_norm(self.rows.hidden))
        spans = self.rows.spans()
        feeds, reorder, ended = {}, {}, []
        for m in list(self.rows.members):
            row = by_state[id(m)]
            lo, hi = spans[id(m)]
            try:
                nxt = self._advance(m, logits[lo:hi])
                if nxt is None:
                    ended.append(m)
                    self._end_segment(m, row)
                else:
                    feeds[id(m)], parents = nxt
                    if parents is not None and parents != list(range(hi - lo)):
                        reorder[m] = parents
            except Exception as err:  # noqa: BLE001 - the row fails alone; the engine hands it to its request
                row.done, row.error = True, err
                if m not in ended:
                    ended.append(m)
        for m in ended:
            self.rows.remove(m)
        self.rows.reorder(reorder)
        if self.rows.members:
            self.rows.step(mx.concatenate([feeds[id(m)] for m in self.rows.members], 0))

    def take(self, row: Row) -> np.ndarray | None:
        return take_pieces(row.state.audio)

    def drop(self, row: Row) -> None:
        m = row.state
        self.rows.discard(m)
        if m in self.waiting:
            self.waiting.remove(m)

    # ---- one request's segments
    def _begin(self, m: GPTRow) -> None:
        """The next segment's prompt and search (its PRNG key the next of the request's stream,
        as the single loop draws it), waiting to be prefilled."""
        p, gpt = m.plan, self.gpt
        ids = p.segs[m.segment]
        m.embeds = gpt.prompt(p.cond, p.emo, np.asarray(ids, np.int64)[None])
        key = m.keys.next()
        if p.beams == 1:
            m.search = SampleSearch(gpt.args, p.params, p.min_codes, key)
        else:
            m.search = BeamSearch(gpt.args, p.params, p.beams, p.max_codes, p.min_codes, key)
        m.codes = []
        self.waiting.append(m)

    def _join(self, m: GPTRow) -> None:
        """Prefill the segment alone (prompt and start code), its beams joining as copies."""
        self.waiting.remove(m)
        x = mx.concatenate([m.embeds, self.gpt.start_embedding(1).astype(m.embeds.dtype)], axis=1)
        cache = self.gpt.gpt.make_cache()
        h = self.gpt.gpt(input_embeddings=x, cache=cache)[:, -1]
        n = m.plan.beams
        if n > 1:
            select_rows(cache, [0] * n)
            h = mx.broadcast_to(h, (n, h.shape[-1]))
        self.rows.join(m, [cache], [h])

    def _advance(self, m: GPTRow, logits: mx.array) -> tuple[mx.array, list[int] | None] | None:
        """The request's next step from its rows' logits: the embeddings to feed (and, for beams,
        the beam each row continues), or None when the segment's codes are complete."""
        gpt, p = self.gpt, m.plan
        if isinstance(m.search, BeamSearch):
            nxt = m.search.advance(logits)
            if nxt is None:
                return None
            toks, parents = nxt
            return gpt.code_embedding(mx.array(toks, mx.int32), m.search.generated - 1), parents
        tok = m.search.draw(logits)
        t = int(tok.item())
        if t == gpt.args.stop_mel_token:
            return None
        m.codes.append(t)
        if len(m.codes) >= p.max_codes:
            return None
        return gpt.code_embedding(tok, len(m.codes) - 1), None

    def _end_segment(self, m: GPTRow, row: Row) -> None:
        """The segment's codes to audio; then the next segment waits, or the request is done."""
        p = m.plan
        if isinstance(m.search, BeamSearch):
            codes, ended = m.search.result()
        else:
            codes = m.codes
            ended = len(codes) < p.max_codes
        if not ended and p.min_codes < p.max_codes:
            raise self.pipe.limit_reached(p.max_codes)
        ids = p.segs[m.segment]
        if m.segment:
            m.audio.append(silence())
        m.audio.append(self.pipe.decode(m.request, p.voice, m.embeds, ids, codes, m.keys.next()))
        m.segment += 1
        if m.segment < len(p.segs):
            self._begin(m)
        else:
            row.done = True
