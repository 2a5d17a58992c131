"""CosyVoice3 rows (the :class:`~ttscli.models.base.RowGenerator` of ``CosyVoice3Pipeline.rows()``).

The LM's token loop (:meth:`ttscli.models.cosyvoice3.llm.CosyVoice3LM.generate`) for many
requests at once: each request is prefilled alone (its own prompt: zero-shot, cross-lingual or
instruct, any length) and joins one :class:`ttscli.lm.batch.MemberBatch`; then one Qwen2
forward and one ``llm_decoder`` head per token over every row, and per row upstream's RAS draw
with the request's own generator, its ``min_len`` / ``max_len`` and its stop
(:meth:`~ttscli.models.cosyvoice3.llm.CosyVoice3LM.choose`, shared with the single loop). A
row's tokens go to the flow and HiFT as the pipeline sends them: all at once when the row ends
(one-shot, :meth:`~ttscli.models.cosyvoice3.pipeline.CosyVoice3Pipeline.whole`), or on
upstream's token hops through its own :class:`~ttscli.models.cosyvoice3.pipeline.TokenStream`
(streamed). So a row's audio is that of the same request alone with the same seed, up to the
rounding of batched matmuls.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from ttscli.lm.batch import MemberBatch, take_pieces
from ttscli.models.base import Request, Row
from ttscli.models.cosyvoice3.frontend import Voice
from ttscli.models.cosyvoice3.llm import Draw
from ttscli.models.cosyvoice3.pipeline import TokenStream


@dataclass(eq=False)
class LMRow:
    """One request's LM state and what its tokens become."""

    request: Request
    voice: Voice
    embeds: mx.array                          # the prefill [1, L, H]
    draw: Draw                                # RAS with the request's own generator
    min_len: int
    max_len: int
    tokens: list[int] = field(default_factory=list)
    stream: TokenStream | None = None         # a streamed request's hops
    audio: list[np.ndarray] = field(default_factory=list)


class CosyVoice3Rows:
    def __init__(self, pipe):
        self.pipe = pipe
        self.lm = pipe.lm
        self.rows = MemberBatch(self.lm.backbone)

    # ---- the row protocol
    def start(self, request: Request) -> Row:
        p = self.pipe
        voice = p.checked_voice(request)
        prompt = p.lm_prompt(request, voice)
        m = LMRow(request, voice, self.lm.prompt(prompt.text_ids, prompt.speech), p.draw(request),
                  prompt.min_len, prompt.max_len)
        if request.stream:
            m.stream = TokenStream(p, voice)
        return Row(request, m)

    def step(self, rows: Sequence[Row]) -> None:
        by_state = {id(row.state): row for row in rows}
        self._join([row.state for row in rows if row.state not in self.rows.members])
        logp = np.array(self.lm.logp(self.rows.hidden[:, None]))
        spans = self.rows.spans()
        embeds, ended = [], []
        for m in self.rows.members:
            row = by_state[id(m)]
            try:
                tok = self._token(m, logp[spans[id(m)][0]])
                if tok is None:
                    self._finish(m)
                    row.done = True
            except Exception as err:  # noqa: BLE001 - the row fails alone; the engine hands it to its request
                row.done, row.error = True, err
            if row.done:
                ended.append(m)
            else:
                embeds.append(self.lm.embed(tok))
        for m in ended:
            self.rows.remove(m)
        if embeds:
            self.rows.step(mx.concatenate(embeds, 0))

    def take(self, row: Row) -> np.ndarray | None:
        return take_pieces(row.state.audio)

    def drop(self, row: Row) -> None:
        self.rows.discard(row.state)

    # ---- the batch
    def _join(self, new: list[LMRow]) -> None:
        for m in new:
            cache = self.lm.backbone.make_cache()
            h = self.lm.backbone(input_embeddings=m.embeds, cache=cache)
            self.rows.join(m, [cache], [h[:, -1]])

    # ---- one request's token, as CosyVoice3LM.generate draws it
    def _token(self, m: LMRow, logp: np.ndarray) -> int | None:
        """The next token (streamed requests: passed on to their stream), or None when the row
        ended; past its limit a LimitReached, as alone."""
        r = m.request
        tok = self.lm.choose(logp, m.tokens, m.draw, m.min_len, m.max_len, ignore_eos=r.ignore_eos)
        if tok is None:
            return None
        m.tokens.append(tok)
        if m.stream is not None:
            piece = m.stream.add(tok)
            if piece is not None and len(piece):
                m.audio.append(piece)
        return tok

    def _finish(self, m: LMRow) -> None:
        """Every token is drawn: the stream's last pass, or the one-shot decode."""
        if m.stream is not None:
            m.audio.append(m.stream.end())
        else:
            m.audio.append(self.pipe.whole(m.tokens, m.voice, m.request.speed))
