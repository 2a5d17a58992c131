"""T3: a Llama backbone (ttscli.lm) fed its own embeddings, text in, speech tokens out.

The prefill is ``[cond | text | BOS | BOS]`` exactly as the reference builds it: its
``prepare_input_embeds`` appends one start-of-speech embedding and its ``inference`` a second
one, both at speech position 0 (dropping one changes the token distribution).  Classifier-free
guidance runs as a batch of two rows that differ only in the text token embeddings, zeroed in
the second row (the text position embeddings stay).  Learned position tables restart at 0 for
the text and for the speech; RoPE runs over the whole sequence inside the backbone.

Sampling follows the reference's order, which is not Hugging Face's generate order: repetition
penalty (over every id so far, start-of-speech included) -> temperature -> min-p -> top-p ->
draw.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx
from mlx import nn

from ttscli.errors import GenerationError, LimitReached
from ttscli.lm.model import DecoderLM
from ttscli.lm.sample import (
    NEG_INF,
    SamplingParams,
    apply_repetition_penalty,
    filter_logits,
)
from ttscli.models.chatterbox.cond_enc import T3CondEnc
from ttscli.models.chatterbox.config import T3Args


class LearnedPositionEmbeddings(nn.Module):
    def __init__(self, n: int, dim: int):
        super().__init__()
        self.emb = nn.Embedding(n, dim)

    def __call__(self, length: int, offset: int = 0) -> mx.array:
        """Rows ``offset .. offset + length - 1``, ``[length, dim]``."""
        if offset + length > self.emb.weight.shape[0]:
            raise GenerationError(f"position {offset + length - 1} is past the model's table "
                                  f"of {self.emb.weight.shape[0]} positions")
        return self.emb.weight[offset:offset + length]


@dataclass
class T3Cond:
    """A voice as T3 sees it (the reference's T3Cond): speaker embedding ``[1, 256]``, prompt
    speech tokens ``[1, P]`` (P <= 150) or None, and the exaggeration."""

    speaker_emb: Any
    prompt_tokens: Any | None
    exaggeration: float = 0.5

    def with_exaggeration(self, value: float) -> T3Cond:
        return replace(self, exaggeration=float(value))


@dataclass(frozen=True)
class T3Sampling:
    """The reference's generation settings (ChatterboxTTS.generate defaults)."""

    temperature: float = 0.8
    min_p: float = 0.05
    top_p: float = 1.0
    repetition_penalty: float = 1.2
    cfg_weight: float = 0.5
    max_new_tokens: int = 1000

    def params(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, min_p=self.min_p,
                              repetition_penalty=self.repetition_penalty).validate("chatterbox")


def limit_message(limit: int, cap: int) -> str:
    """The one line for a generation that reached ``limit`` speech tokens without the stop token:
    how to raise it (the request's max_frames), unless it is the model's own ``cap``."""
    how = ("the model's own cap; split the text" if limit >= cap
           else "raise it with --max-frames (`max_frames` in a server request), or split the text")
    return f"T3 reached its limit of {limit} speech tokens without the stop token ({how})"


def process_logits(logits: mx.array, p: SamplingParams, seen: mx.array | None) -> mx.array:
    """``[B, V]`` logits through the reference's processors, in its order; filtered ids -> -inf.

    The two filters are applied one after the other (min-p on the tempered distribution, then
    top-p on what min-p left), which is what makes the order matter."""
    x = logits.astype(mx.float32)
    x = mx.where(mx.isnan(x), NEG_INF, x)
    if seen is not None:
        x = apply_repetition_penalty(x, seen, p.repetition_penalty)
    x = filter_logits(x, SamplingParams(temperature=max(p.temperature, 1e-6), min_p=p.min_p))
    return filter_logits(x, SamplingParams(top_p=p.top_p))


def draw(logits: mx.array, p: SamplingParams, seen: mx.array | None, key: mx.array | None) -> mx.array:
    """One id per row, int32 ``[B]``. Greedy at temperature ~0; a row left with nothing finite
    (every probability underflowed) falls back to the argmax of its penalised logits."""
    x = logits.astype(mx.float32)
    x = mx.where(mx.isnan(x), NEG_INF, x)
    penalised = apply_repetition_penalty(x, seen, p.repetition_penalty) if seen is not None else x
    fallback = mx.argmax(penalised, axis=-1).astype(mx.int32)
    if p.greedy:
        return fallback
    f = process_logits(x, p, seen)
    drawn = mx.random.categorical(f, axis=-1, key=key).astype(mx.int32)
    return mx.where(mx.isfinite(f.max(axis=-1)), drawn, fallback)


class T3(nn.Module):
    def __init__(self, args: T3Args):
        super().__init__()
        self.args = args
        D = args.hidden_size
        self.tfmr = DecoderLM(args.lm_args(), embed_tokens=True)
        self.cond_enc = T3CondEnc(D, args.speaker_embed_size, args.perceiver_queries, args.perceiver_heads)
        self.text_emb = nn.Embedding(args.text_vocab, D)
        self.speech_emb = nn.Embedding(args.speech_vocab, D)
        self.text_pos_emb = LearnedPositionEmbeddings(args.max_text_tokens + 2, D)
        self.speech_pos_emb = LearnedPositionEmbeddings(args.max_speech_tokens + 2 + 2, D)
        self.text_head = nn.Linear(D, args.text_vocab, bias=False)
        self.speech_head = nn.Linear(D, args.speech_vocab, bias=False)

    # -- the code-decoder protocol (ttscli.lm.decoder.LMHeadModel) --------------------------------
    def new_cache(self) -> list:
        return self.tfmr.make_cache()

    def __call__(self, embeds: mx.array, cache: Any) -> tuple[mx.array, mx.array]:
        h = self.tfmr(cache=cache, input_embeddings=embeds)[:, -1]
        return self.speech_head(h), h

    def step_parts(self):
        """The stack and head of a decode step (for ttscli.lm.cuda_step's one-kernel step)."""
        return self.tfmr, self.speech_head

    # -- embeddings -----------------------------------------------------------------------------
    def conditioning(self, cond: T3Cond) -> mx.array:
        """``[1, 34, D]`` (``[1, 2, D]`` without prompt tokens)."""
        spk = mx.array(cond.speaker_emb).astype(self.text_emb.weight.dtype).reshape(1, -1)
        prompt = None
        if cond.prompt_tokens is not None:
            toks = mx.array(cond.prompt_tokens).astype(mx.int32).reshape(1, -1)
            prompt = self.speech_emb(toks) + self.speech_pos_emb(toks.shape[1])
        exag = mx.array([cond.exaggeration], dtype=spk.dtype)
        return self.cond_enc(spk, prompt, exag)

    def text_ids(self, ids: Sequence[int]) -> list[int]:
        """The framing ``[START] ids [STOP]``."""
        if len(ids) + 2 > self.args.max_text_tokens + 2:
            raise GenerationError(f"text is {len(ids)} tokens; T3 takes at most {self.args.max_text_tokens}")
        return [self.args.start_text_token, *ids, self.args.stop_text_token]

    def speech_embed(self, token: mx.array, position: int) -> mx.array:
        """``token [B]`` at speech position ``position`` -> ``[B, 1, D]``."""
        return (self.speech_emb(token.reshape(-1, 1)) + self.speech_pos_emb(1, position))

    def prefill_embeds(self, cond: T3Cond, ids: Sequence[int], cfg: bool) -> mx.array:
        """``[B, 34 + len(ids) + 2 + 2, D]``: conditioning, framed text, BOS, BOS; B = 2 with CFG."""
        framed = mx.array(self.text_ids(ids), mx.int32)[None]
        text = self.text_emb(framed)
        if cfg:
            text = mx.concatenate([text, mx.zeros_like(text)], axis=0)
        text = text + self.text_pos_emb(framed.shape[1])
        B = text.shape[0]
        c = self.conditioning(cond)
        c = mx.broadcast_to(c, (B, *c.shape[1:]))
        bos = self.speech_embed(mx.array([self.args.start_speech_token]), 0)
        bos = mx.broadcast_to(bos, (B, 1, bos.shape[-1]))
        return mx.concatenate([c, text, bos, bos], axis=1)

    # -- generation -----------------------------------------------------------------------------
    def generate(self, cond: T3Cond, ids: Sequence[int], s: T3Sampling, *, decoder: Any = None,
                 keys: Any = None, ignore_eos: bool = False) -> Iterator[int]:
        """Speech tokens as they are drawn (the stop token ends it and is not yielded). Reaching
        ``max_new_tokens`` without the stop token is a GenerationError: never a cut-off file.

        ``decoder``: a code decoder over this model (default: MLX); ``keys``: a
        ttscli.lm.KeyStream for the draws (default: MLX's global PRNG); ``ignore_eos`` (bench at
        random weights): the stop token is never drawn and the limit simply ends the tokens."""
        from ttscli.lm.decoder import MLXCodeDecoder

        p = s.params()
        cfg = s.cfg_weight > 0.0
        decoder = decoder if decoder is not None else MLXCodeDecoder(self)
        cache = decoder.new_cache()
        V = self.args.speech_vocab
        seen = mx.zeros((1, V), dtype=mx.bool_)
        seen[0, self.args.start_speech_token] = True
        limit = min(s.max_new_tokens, self.args.max_speech_tokens + 2)
        logits, _ = decoder.prefill(self.prefill_embeds(cond, ids, cfg), cache)
        w = mx.array(s.cfg_weight, dtype=mx.float32)
        no_stop = (mx.arange(V) == self.args.stop_speech_token) if ignore_eos else None
        for i in range(limit):
            logits = logits.astype(mx.float32)
            if cfg:
                logits = logits[0:1] + w * (logits[0:1] - logits[1:2])
            if no_stop is not None:
                logits = mx.where(no_stop, NEG_INF, logits)
            tok = draw(logits, p, seen, keys.next() if keys is not None else None)
            t = int(tok.item())
            if t == self.args.stop_speech_token:
                return
            yield t
            seen[0, t] = True
            e = self.speech_embed(tok, i + 1)
            if cfg:
                e = mx.concatenate([e, e], axis=0)
            logits, _ = decoder.step(e, cache)
        if ignore_eos:
            return
        raise LimitReached(limit_message(limit, self.args.max_speech_tokens + 2))
