"""IndexTTS2's text-to-semantic LM: the language-model half of upstream's ``UnifiedVoice``.

A GPT-2 stack (:mod:`ttscli.lm.gpt2`, 24 x 1280 published) without its own token or position
tables: the prompt brings its own embeddings, and two learned tables give positions that restart
at 0 for the text and for the codes. Parameters are named as ``gpt.pth``'s tensors
(``text_embedding``, ``text_pos_embedding.emb``, ``mel_embedding``, ``mel_pos_embedding.emb``,
``gpt.h.N.*``, ``gpt.ln_f``, ``final_norm``, ``mel_head``, ``text_head``, ``speed_emb``); the
conditioners stored in the same file are another module's.

The prompt is ``[speaker latents + emovec | speed_emb[1] | speed_emb[0] | text]``, the text
framed by its start / stop ids with its own positions from 0 (``prepare_gpt_inputs``), then the
start code at code position 0. Generated code ``i`` (0-based) enters at code position ``i + 2``:
upstream's inference wrapper takes a code's position from the attention mask's length, which
already counts the code, so position 1 is never used while decoding (the S2Mel latent pass,
:meth:`SemanticGPT.latent`, runs the training layout instead, codes at 1, 2, ...). The logits are
``mel_head(final_norm(h))`` over GPT-2's own ``ln_f`` output.

Decoding follows upstream's vendored Hugging Face ``generate``: the repetition penalty sees the
ids that ``generate`` sees (the fake prompt ids, all ``1``, the start code and the codes so far),
then temperature, top-k and top-p; beam search scores log-probabilities (the penalty then acts on
those) and keeps the ``BeamSearchScorer``'s hypotheses and stopping rule, so deterministic beam
search reproduces upstream's codes exactly.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ttscli.checkpoint import load_strict
from ttscli.config import BaseArgs
from ttscli.errors import GenerationError, LimitReached
from ttscli.lm.cache import KVCache
from ttscli.lm.gpt2 import GPT2Args, GPT2Model, select_rows
from ttscli.lm.sample import (
    NEG_INF,
    SamplingParams,
    apply_repetition_penalty,
    filter_logits,
    logit_bias,
    sample_with,
)

# the fake input id upstream's ``prepare_gpt_inputs`` gives every prompt position; the repetition
# penalty sees it among the ids, so code 1 is penalised from the first step
FAKE_PROMPT_ID = 1
# beam search: the running beams' initial scores past the first (HF's -1e9: only beam 0 is
# expanded at the first step, the beams being identical)
_FIRST_STEP_ONLY = -1e9


@dataclass
class GPTArgs(BaseArgs):
    """``config.yaml``'s ``gpt`` section (unknown keys, the conditioners' among them, ignored);
    defaults where ``UnifiedVoice.__init__`` has them and the yaml may leave them out."""

    model_dim: int
    layers: int
    heads: int
    max_mel_tokens: int
    max_text_tokens: int
    number_text_tokens: int
    number_mel_codes: int
    start_mel_token: int = 8192
    stop_mel_token: int = 8193
    start_text_token: int = 0
    stop_text_token: int = 1
    max_conditioning_inputs: int = 1
    types: int = 1
    condition_num_latent: int = 32

    @classmethod
    def published(cls) -> GPTArgs:
        """The released checkpoint's sizes (``IndexTeam/IndexTTS-2`` ``config.yaml``)."""
        return cls(model_dim=1280, layers=24, heads=20, max_mel_tokens=1815, max_text_tokens=600,
                   number_text_tokens=12000, number_mel_codes=8194)

    @property
    def text_vocab(self) -> int:
        return self.number_text_tokens * self.types + 1

    @property
    def text_positions(self) -> int:
        return self.max_text_tokens + 2

    @property
    def mel_positions(self) -> int:
        return self.max_mel_tokens + 2 + self.max_conditioning_inputs

    @property
    def cond_rows(self) -> int:
        """Prompt rows before the text: the speaker latents and the two speed rows."""
        return self.condition_num_latent + 2

    def gpt2(self) -> GPT2Args:
        return GPT2Args(n_embd=self.model_dim, n_layer=self.layers, n_head=self.heads)


def gumbel(shape: tuple[int, ...], key: mx.array | None) -> mx.array:
    """The Gumbel noise of one draw (every draw here is the Gumbel-max / Gumbel-top-k form of a
    categorical draw); one function, so a test can replay another implementation's noise."""
    return mx.random.gumbel(shape, key=key)


class LearnedPositions(nn.Module):
    """A learned position table (upstream's ``LearnedPositionEmbeddings``: the table is ``emb``)."""

    def __init__(self, n: int, dim: int):
        super().__init__()
        self.emb = nn.Embedding(n, dim)

    def rows(self, start: int, length: int) -> mx.array:
        """Positions ``start .. start + length - 1``, ``[length, dim]``."""
        n = self.emb.weight.shape[0]
        if start < 0 or start + length > n:
            raise GenerationError(f"position {start + length - 1} is past the model's table of {n} positions")
        return self.emb.weight[start:start + length]


class CodeLimitReached(LimitReached):
    """``max_tokens`` codes without the stop code. ``codes`` holds them (every one was yielded),
    for a caller that wants the cut-off sequence anyway (bench)."""

    def __init__(self, message: str, codes: list[int]):
        super().__init__(message)
        self.codes = codes


def _ids(text_ids: Any) -> np.ndarray:
    a = np.asarray(text_ids.tolist() if isinstance(text_ids, mx.array) else text_ids, dtype=np.int64)
    return a[None] if a.ndim == 1 else a


class SemanticGPT(nn.Module):
    def __init__(self, args: GPTArgs):
        super().__init__()
        self.args = args
        D = args.model_dim
        self.text_embedding = nn.Embedding(args.text_vocab, D)
        self.text_pos_embedding = LearnedPositions(args.text_positions, D)
        self.mel_embedding = nn.Embedding(args.number_mel_codes, D)
        self.mel_pos_embedding = LearnedPositions(args.mel_positions, D)
        self.speed_emb = nn.Embedding(2, D)
        self.gpt = GPT2Model(args.gpt2())
        self.final_norm = nn.LayerNorm(D)
        self.mel_head = nn.Linear(D, args.number_mel_codes)
        self.text_head = nn.Linear(D, args.text_vocab)      # kept for the checkpoint; unused at inference
        # the decoding forward on another runtime (onnx_gpt.OnnxGPT), or None for this MLX stack
        self.decoder = None

    # -- prompt ----------------------------------------------------------------------------------
    def framed_text(self, text_ids: Any, drop_specials: bool = True) -> mx.array:
        """``[B, L' + 2]`` ids ``[start] ids [stop]``. ``drop_specials``: first remove start / stop
        ids from the text, as ``prepare_gpt_inputs`` does (``forward`` does not)."""
        a = self.args
        rows = []
        for row in _ids(text_ids):
            if drop_specials:
                row = row[(row != a.start_text_token) & (row != a.stop_text_token)]
            rows.append([a.start_text_token, *row.tolist(), a.stop_text_token])
        if len({len(r) for r in rows}) != 1:
            raise ValueError("text rows of unequal length (after dropping start / stop ids) need a padded "
                             "prompt, which is not supported: run them one at a time")
        if len(rows[0]) > a.text_positions:
            raise GenerationError(f"text is {len(rows[0]) - 2} tokens; the GPT takes at most {a.max_text_tokens}")
        return mx.array(rows, mx.int32)

    def text_embeds(self, framed: mx.array) -> mx.array:
        return self.text_embedding(framed) + self.text_pos_embedding.rows(0, framed.shape[1])

    def conditioning(self, cond_latents: mx.array, emovec: mx.array) -> mx.array:
        """``[B, 32 + 2, D]``: the speaker latents plus the emotion vector, then the speed rows 1
        and 0 (upstream's free-length mode; the released code has no other)."""
        cond = cond_latents + emovec.reshape(emovec.shape[0], 1, -1)
        speed = self.speed_emb.weight[mx.array([1, 0])]
        speed = mx.broadcast_to(speed[None], (cond.shape[0], 2, speed.shape[-1]))
        return mx.concatenate([cond, speed.astype(cond.dtype)], axis=1)

    def prompt(self, cond_latents: mx.array, emovec: mx.array, text_ids: Any) -> mx.array:
        """``cond_latents [B or 1, 32, D]``, ``emovec [B or 1, D]``, ``text_ids [B, L]`` (BPE ids)
        -> ``[B, 32 + 2 + L + 2, D]``, as ``inference_speech`` assembles it (start / stop ids inside
        the text dropped first)."""
        framed = self.framed_text(text_ids)
        text = self.text_embeds(framed)
        cond = self.conditioning(cond_latents, emovec)
        if cond.shape[0] != text.shape[0]:
            cond = mx.broadcast_to(cond, (text.shape[0], *cond.shape[1:]))
        return mx.concatenate([cond, text.astype(cond.dtype)], axis=1)

    # -- decoding --------------------------------------------------------------------------------
    def make_cache(self) -> list[KVCache]:
        return self.decoder.new_cache() if self.decoder is not None else self.gpt.make_cache()

    new_cache = make_cache        # the name ttscli.lm.decoder's protocol uses

    def start_embedding(self, batch: int = 1) -> mx.array:
        """The start code at code position 0, ``[batch, 1, D]``."""
        e = self.mel_embedding.weight[self.args.start_mel_token] + self.mel_pos_embedding.rows(0, 1)[0]
        return mx.broadcast_to(e, (batch, 1, e.shape[-1]))

    def code_embedding(self, codes: mx.array, index: int) -> mx.array:
        """Generated code number ``index`` (0-based; the same for every row), ``codes [B]`` ->
        ``[B, 1, D]`` at code position ``index + 2`` (see the module docstring)."""
        return self.mel_embedding(codes.reshape(-1, 1)) + self.mel_pos_embedding.rows(index + 2, 1)

    def __call__(self, embeds: mx.array, cache: Sequence[KVCache] | None = None) -> tuple[mx.array, mx.array]:
        """Logits ``[B, V]`` and hidden state ``[B, D]`` (after ``final_norm``) of the last position
        of ``embeds [B, T, D]``; the caches grow by T."""
        if self.decoder is not None and cache is not None:
            return self.decoder(embeds, cache)
        h = self.gpt(input_embeddings=embeds, cache=cache)
        h = self.final_norm(h[:, -1])
        return self.mel_head(h), h

    def prefill(self, embeds: mx.array, cache: Sequence[KVCache], return_hidden: bool = False):
        """The prompt ``[B, T, D]`` (from :meth:`prompt`) and the start code: the logits of the first
        code ``[B, V]`` (and the hidden state ``[B, D]`` with ``return_hidden``)."""
        x = mx.concatenate([embeds, self.start_embedding(embeds.shape[0]).astype(embeds.dtype)], axis=1)
        logits, h = self(x, cache)
        return (logits, h) if return_hidden else logits

    def step(self, codes: mx.array, index: int, cache: Sequence[KVCache], return_hidden: bool = False):
        """Feed generated code number ``index`` (0-based), ``codes [B]``: the next logits ``[B, V]``."""
        logits, h = self(self.code_embedding(codes, index), cache)
        return (logits, h) if return_hidden else logits

    def generate(self, embeds: mx.array, params: SamplingParams, *, max_tokens: int, min_tokens: int = 0,
                 key: mx.array | None = None, num_beams: int = 1, length_penalty: float = 0.0) -> Iterator[int]:
        """Codes for one prompt ``embeds [1, T, D]``, the stop code ending it (not yielded).

        ``num_beams`` 1 yields each code as it is drawn; beam search (deterministic with
        ``params.do_sample`` False, beam sampling otherwise) yields the best hypothesis at the end.
        ``min_tokens``: the stop code is barred before that many codes. ``max_tokens`` codes without
        the stop raise :class:`CodeLimitReached` after they are yielded, unless ``min_tokens >=
        max_tokens`` (a forced length, which ends there by design). ``key``: the PRNG key of the
        draws (None: MLX's global generator).
        """
        if embeds.shape[0] != 1:
            raise ValueError(f"generate takes one prompt, got a batch of {embeds.shape[0]}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if num_beams < 1:
            raise ValueError(f"num_beams must be >= 1, got {num_beams}")
        if max_tokens >= self.args.mel_positions:
            raise GenerationError(f"max_tokens {max_tokens} is past the model's {self.args.mel_positions - 1} "
                                  "code positions")
        params.validate("IndexTTS2 GPT sampling")
        forced = min_tokens >= max_tokens
        if num_beams == 1:
            codes = yield from self._sample(embeds, params, max_tokens, min_tokens, key)
        else:
            codes, ended = self._beam(embeds, params, max_tokens, min_tokens, key, num_beams, length_penalty)
            yield from codes
            codes = None if ended else codes
        if codes is not None and not forced:
            raise CodeLimitReached(f"the IndexTTS2 GPT reached its limit of {max_tokens} codes without the stop "
                                   "code (raise max_tokens, or split the text)", list(codes))

    def _sample(self, embeds, params, max_tokens, min_tokens, key):
        """One row: greedy or sampled. Returns the codes when the limit ended it, else None.

        Each step's next logits are queued before the drawn code is read back, so the host reads
        one code while the next forward is already computing."""
        search = SampleSearch(self.args, params, min_tokens, key)
        cache = self.make_cache()
        logits = self.prefill(embeds, cache)
        codes: list[int] = []
        for i in range(max_tokens):
            tok = search.draw(logits)
            if i + 1 < max_tokens:
                logits = self.step(tok, i, cache)
                mx.async_eval(logits, tok)
            t = int(tok.item())
            if t == self.args.stop_mel_token:
                return None
            codes.append(t)
            yield t
        return codes

    def _beam(self, embeds, params, max_tokens, min_tokens, key, beams, length_penalty) -> tuple[list[int], bool]:
        """Hugging Face's beam search / beam sampling for one prompt (:class:`BeamSearch`)."""
        search = BeamSearch(self.args, params, beams, max_tokens, min_tokens, key, length_penalty)
        cache = self.make_cache()
        logits = self.prefill(embeds, cache)
        select = self.decoder.select_rows if self.decoder is not None else select_rows
        select(cache, [0] * beams)                  # the beams start as copies of one prefill
        logits = mx.broadcast_to(logits, (beams, logits.shape[-1]))
        while (nxt := search.advance(logits)) is not None:
            toks, parents = nxt
            if parents != list(range(beams)):
                select(cache, parents)
            logits = self.step(mx.array(toks, mx.int32), search.generated - 1, cache)
        return search.result()

    # -- the S2Mel latent ------------------------------------------------------------------------
    def latent(self, embeds_prompt: mx.array, text_ids: Any, codes: Any) -> mx.array:
        """``UnifiedVoice.forward(..., return_latent)``, what S2Mel's ``gpt_layer`` reads:
        ``[B, n, D]`` for ``codes [B, n]`` (cut at the stop code).

        The conditioning rows are the prompt's first ``32 + 2`` (latents + emovec, speed 1, 0); the
        text is framed again from ``text_ids`` as ``forward`` frames it (start / stop ids inside
        the text kept); the codes go in as ``[start] codes [stop]`` at code positions 0 .. n + 1,
        all in one causal pass. The final-normed states of those n + 2 positions, without the
        last two, are the latent: position ``j`` is the state that predicted code ``j``.
        """
        a = self.args
        c = np.asarray(codes.tolist() if isinstance(codes, mx.array) else codes, dtype=np.int64)
        c = c[None] if c.ndim == 1 else c
        n = c.shape[1]
        mel = np.concatenate([np.full((c.shape[0], 1), a.start_mel_token), c,
                              np.full((c.shape[0], 1), a.stop_mel_token)], axis=1)
        mel = mx.array(mel, mx.int32)
        mel_emb = self.mel_embedding(mel) + self.mel_pos_embedding.rows(0, n + 2)
        text = self.text_embeds(self.framed_text(text_ids, drop_specials=False))
        cond = embeds_prompt[:, :a.cond_rows]
        B = max(cond.shape[0], text.shape[0], mel_emb.shape[0])
        parts = [mx.broadcast_to(p, (B, *p.shape[1:])).astype(cond.dtype) for p in (cond, text, mel_emb)]
        h = self.gpt(input_embeddings=mx.concatenate(parts, axis=1))
        return self.final_norm(h[:, -(n + 2):-2])


def first_seen(args: GPTArgs, rows: int) -> mx.array:
    """The ids the repetition penalty sees before the first code: the fake prompt id and the start
    code, ``[rows, V]``."""
    V = args.number_mel_codes
    first = (mx.arange(V) == FAKE_PROMPT_ID) | (mx.arange(V) == args.start_mel_token)
    return mx.broadcast_to(first[None], (rows, V))


class SampleSearch:
    """One row's greedy or sampled codes, a step at a time: the penalty's seen ids, the stop barred
    before ``min_tokens`` codes, the draws' PRNG key (None: MLX's global generator)."""

    def __init__(self, args: GPTArgs, params: SamplingParams, min_tokens: int, key: mx.array | None):
        self.params, self.min_tokens, self.key = params, min_tokens, key
        self.seen = first_seen(args, 1)
        self.no_stop = logit_bias(args.number_mel_codes, [args.stop_mel_token])
        self.vocab = mx.arange(args.number_mel_codes)
        self.drawn = 0

    def draw(self, logits: mx.array) -> mx.array:
        """The next code ``[1]`` from ``logits [1, V]`` (lazy: not evaluated here)."""
        sub = None
        if self.key is not None and not self.params.greedy:
            self.key, sub = mx.random.split(self.key)
        noise = None if self.params.greedy else gumbel(logits.shape, sub)
        tok = sample_with(logits, self.params, noise, seen=self.seen,
                          bias=self.no_stop if self.drawn < self.min_tokens else None)
        self.seen = self.seen | (self.vocab == tok[:, None])
        self.drawn += 1
        return tok


class BeamSearch:
    """Hugging Face's beam search / beam sampling for one prompt (as upstream's vendored
    ``_beam_search`` with its ``BeamSearchScorer``), a step at a time, so that one prompt's
    beams can be decoded alone (:meth:`SemanticGPT.generate`) or as rows of a batch beside other
    requests' (ttscli.models.indextts2.rows): :meth:`advance` takes the beams' logits and names
    the codes to feed next and the beam each continues; :meth:`result` gives the best hypothesis."""

    def __init__(self, args: GPTArgs, params: SamplingParams, beams: int, max_tokens: int, min_tokens: int,
                 key: mx.array | None, length_penalty: float = 0.0):
        self.params, self.beams, self.max_tokens, self.min_tokens, self.key = params, beams, max_tokens, min_tokens, key
        self.V, self.stop = args.number_mel_codes, args.stop_mel_token
        self.seen = first_seen(args, beams)
        self.vocab = mx.arange(self.V)
        self.no_stop = logit_bias(self.V, [self.stop])
        self.scores = mx.array([0.0] + [_FIRST_STEP_ONLY] * (beams - 1), mx.float32)
        self.running: list[list[int]] = [[] for _ in range(beams)]
        self.hyps = _Hypotheses(beams, length_penalty)
        self.generated = 0            # steps scored
        self.done = False             # the scorer's stopping rule ended the search

    def advance(self, logits: mx.array) -> tuple[list[int], list[int]] | None:
        """Score the beams' next codes from ``logits [beams, V]``: the codes to feed next and, for
        each, the beam it continues; None when the search has ended (its stopping rule, or
        ``max_tokens`` codes)."""
        p, V, beams, i = self.params, self.V, self.beams, self.generated
        keep = 2 * beams                             # max(2, 1 + one stop id) per beam
        x = logits.astype(mx.float32)
        x = x - mx.logsumexp(x, axis=-1, keepdims=True)
        x = apply_repetition_penalty(x, self.seen, p.repetition_penalty)
        if i < self.min_tokens:
            x = x + self.no_stop
        if not p.greedy:
            x = _beam_filter(x, p)
        flat = (x + self.scores[:, None]).reshape(-1)
        if p.greedy:
            order = mx.argsort(-flat)[:keep]
        else:
            sub = None
            if self.key is not None:
                self.key, sub = mx.random.split(self.key)
            # sampling ``keep`` candidates without replacement from softmax(flat) is taking the
            # top ``keep`` of flat plus Gumbel noise; then ranked by their scores, as HF sorts
            drawn = mx.argsort(-(flat + gumbel(flat.shape, sub)))[:keep]
            order = drawn[mx.argsort(-flat[drawn])]
        picked = flat[order]
        mx.eval(order, picked)
        cand, cand_scores = np.array(order), np.array(picked)
        new_scores, new_tokens, parents = [], [], []
        for rank, (c, sc) in enumerate(zip(cand.tolist(), cand_scores.tolist())):
            parent, tok = divmod(c, V)
            if tok == self.stop:
                if rank < beams:
                    self.hyps.add(self.running[parent], sc, i + 1, ended=True)
            else:
                new_scores.append(sc)
                new_tokens.append(tok)
                parents.append(parent)
            if len(new_tokens) == beams:
                break
        self.generated = i + 1
        if self.hyps.is_done(float(cand_scores.max()), i + 1):
            self.done = True
            return None
        self.running = [self.running[j] + [t] for j, t in zip(parents, new_tokens)]
        self.scores = mx.array(new_scores, mx.float32)
        toks = mx.array(new_tokens, mx.int32)
        if parents != list(range(beams)):
            self.seen = mx.take(self.seen, mx.array(parents, mx.int32), axis=0)
        self.seen = self.seen | (self.vocab == toks[:, None])
        if self.generated >= self.max_tokens:
            return None
        return new_tokens, parents

    def result(self) -> tuple[list[int], bool]:
        """The best hypothesis' codes (the stop excluded) and whether it ended with the stop (else
        it is a running beam of ``max_tokens`` codes)."""
        if not self.done:
            for tokens, sc in zip(self.running, np.array(self.scores).tolist()):
                self.hyps.add(tokens, sc, len(tokens), ended=False)
            self.done = True
        return self.hyps.best()


def _beam_filter(x: mx.array, p: SamplingParams) -> mx.array:
    """Temperature, top-k and top-p as HF's beam sampling applies them: each keeps at least two
    ids per beam (the stop and one other), where a single row's sampling keeps one. ``min_p``,
    which upstream never sets, is not applied to beams."""
    x = filter_logits(x, replace(p, top_k=max(p.top_k, 2) if p.top_k > 0 else 0, top_p=1.0, min_p=0.0))
    if p.top_p < 1.0:
        s = mx.sort(x, axis=-1)
        cum = mx.cumsum(mx.softmax(s, axis=-1), axis=-1)
        drop = cum <= (1.0 - p.top_p)
        drop[..., -2:] = False
        thresh = mx.where(drop, mx.inf, s).min(axis=-1, keepdims=True)
        x = mx.where(x < thresh, NEG_INF, x)
    return x


class _Hypotheses:
    """The finished hypotheses of one beam search (HF's ``BeamHypotheses``): the ``n`` best by
    ``sum of log-probs / generated length ** length_penalty``, and its stopping rule."""

    def __init__(self, n: int, length_penalty: float):
        self.n = n
        self.length_penalty = length_penalty
        self.beams: list[tuple[float, list[int], bool]] = []
        self.worst = 1e9

    def add(self, tokens: list[int], sum_logprobs: float, generated: int, ended: bool) -> None:
        score = sum_logprobs / generated ** self.length_penalty
        if len(self.beams) < self.n or score > self.worst:
            self.beams.append((score, list(tokens), ended))
            if len(self.beams) > self.n:
                ranked = sorted((s, j) for j, (s, _, _) in enumerate(self.beams))
                del self.beams[ranked[0][1]]
                self.worst = ranked[1][0]
            else:
                self.worst = min(score, self.worst)

    def is_done(self, best_sum_logprobs: float, generated: int) -> bool:
        """No running beam can beat the worst kept hypothesis any more (HF's heuristic: the best
        candidate's score at the current length)."""
        if len(self.beams) < self.n:
            return False
        return self.worst >= best_sum_logprobs / generated ** self.length_penalty

    def best(self) -> tuple[list[int], bool]:
        """The winner's tokens and whether it ended with the stop: the highest score, among equal
        scores the one added last, as HF's sort-then-pop picks."""
        j = max(range(len(self.beams)), key=lambda k: (self.beams[k][0], k))
        return self.beams[j][1], self.beams[j][2]


# ---------------------------------------------------------------------------------------------- loading

# names a gpt.pth may hold beside the module's own tensors that carry nothing to load:
# post_init_gpt2_config's alias of mel_embedding, and the causal-mask buffers older transformers
# saved with every GPT-2 attention layer
_IGNORED = re.compile(r"^gpt\.wte\.weight$|^gpt\.h\.\d+\.attn\.(bias|masked_bias)$")


def lm_weights(weights: Mapping, skip_prefixes: Sequence[str] = ()) -> dict[str, mx.array]:
    """The LM's tensors of a ``gpt.pth`` state dict (numpy or MLX) as MLX arrays: all but those
    under ``skip_prefixes`` (the conditioners') and the ignored aliases / buffers."""
    skip = tuple(skip_prefixes)
    return {k: v if isinstance(v, mx.array) else mx.array(v) for k, v in weights.items()
            if not (skip and k.startswith(skip)) and not _IGNORED.match(k)}


def load_gpt(weights: Mapping, args: GPTArgs, skip_prefixes: Sequence[str] = (), *, source: str = "gpt.pth",
             dtype=None) -> SemanticGPT:
    """:class:`SemanticGPT` from a ``gpt.pth`` state dict: every tensor outside ``skip_prefixes``
    must be exactly the module's (missing, unexpected or mis-shaped ones named in one
    CheckpointError); ``gpt.wte.weight`` is accepted and ignored."""
    return load_strict(SemanticGPT(args), lm_weights(weights, skip_prefixes), source=source, dtype=dtype)


def random_gpt(args: GPTArgs | None = None, *, seed: int = 0, dtype=None) -> SemanticGPT:
    """:class:`SemanticGPT` at ``args``' size (default: the published one) with random weights."""
    from ttscli.nn.init import random_weights

    return random_weights(SemanticGPT(args or GPTArgs.published()), seed=seed, dtype=dtype)
