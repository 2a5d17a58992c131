"""CosyVoice3's LM (``llm.pt``): a Qwen2 decoder (``llm.model.model``, ttscli.lm) fed its own
embeddings, text in, 25 Hz speech tokens out.

The prompt is ``[sos | text ids | task_id | prompt speech tokens]``; ``sos`` and ``task_id`` are
rows of the speech embedding (``speech_token_size + 0`` and ``+ 2``), the text ids go through
Qwen's own embedding. Each step embeds the drawn token with ``speech_embedding`` and scores
``speech_token_size + 200`` ids with ``llm_decoder``; any id at or above ``speech_token_size`` stops
(upstream's ``stop_token_ids``). ``llm.model.lm_head`` (Qwen's text head) is in the file but unused.

Sampling is upstream's ``ras_sampling``: nucleus sampling (top-p 0.8 capped at top-k 25, from
the softmax of the log-probabilities); when the drawn id already occurs ``win_size * tau_r`` or
more times in the last ``win_size`` tokens, it is masked and a plain draw from the full
distribution replaces it. Before ``min_len`` tokens upstream masks id ``speech_token_size``
(the sos id; its stop id is ``+ 1``, so the end of speech is not in fact masked): kept as is.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.errors import LimitReached
from ttscli.lm.model import DecoderLM
from ttscli.models.cosyvoice3.config import CosyVoice3Args, SamplingArgs


class _Qwen2ForCausalLM(nn.Module):
    def __init__(self, a: CosyVoice3Args):
        super().__init__()
        self.model = DecoderLM(a.lm)
        self.lm_head = nn.Linear(a.lm.hidden_size, a.lm.vocab_size, bias=False)


class _Qwen2Encoder(nn.Module):
    def __init__(self, a: CosyVoice3Args):
        super().__init__()
        self.model = _Qwen2ForCausalLM(a)


@dataclass
class Draw:
    """One request's sampling: ``greedy`` (argmax; goldens and tests) or RAS with ``rng``."""
    sampling: SamplingArgs
    rng: np.random.Generator
    greedy: bool = False


def ras_sample(logp: np.ndarray, decoded: list[int], d: Draw) -> int:
    """Upstream's ``ras_sampling`` on one row of log-probabilities."""
    if d.greedy:
        return int(np.argmax(logp))
    s = d.sampling
    probs = np.exp(logp - logp.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    # upstream keeps ids while the running sum is still below top_p and fewer than top_k are kept
    cum = np.concatenate([[0.0], np.cumsum(probs[order])[:-1]])
    keep = order[(cum < s.top_p) & (np.arange(order.size) < s.top_k)]
    p = probs[keep] / probs[keep].sum()
    tok = int(keep[d.rng.choice(keep.size, p=p)])
    if sum(t == tok for t in decoded[-s.win_size:]) >= s.win_size * s.tau_r:
        probs[tok] = 0.0
        tok = int(d.rng.choice(probs.size, p=probs / probs.sum()))
    return tok


class CosyVoice3LM(nn.Module):
    def __init__(self, a: CosyVoice3Args):
        super().__init__()
        self.args = a
        n = a.speech_token_size
        self.sos, self.eos, self.task_id = n, n + 1, n + 2
        self.llm = _Qwen2Encoder(a)
        self.speech_embedding = nn.Embedding(n + 200, a.lm.hidden_size)
        self.llm_decoder = nn.Linear(a.lm.hidden_size, n + 200, bias=False)
        # the stack and head converted to another runtime (onnx_lm.attach), run in their place
        self.decoder = None

    @property
    def backbone(self) -> DecoderLM:
        return self.llm.model.model

    # the shared code decoder's model (ttscli.lm.decoder.LMHeadModel): on a GPU a decode step runs
    # as one compiled trace, or as one kernel of ours (ttscli.lm.cuda_step), instead of some 400
    # separate launches
    def new_cache(self) -> list:
        return self.backbone.make_cache()

    def __call__(self, embeds: mx.array, cache: list) -> tuple[mx.array, mx.array]:
        """Logits over the speech ids and the post-norm hidden state of the last position."""
        h = self.backbone(input_embeddings=embeds, cache=cache)[:, -1]
        return self.llm_decoder(h), h

    def step_parts(self):
        return self.backbone, self.llm_decoder

    def step_decoder(self):
        """The converted decoder where one is attached (onnxruntime), else on a GPU the shared
        MLX code decoder over this LM (made once); None on the CPU, where the plain layers run
        (the path the goldens were taken on)."""
        if self.decoder is not None:
            return self.decoder
        from ttscli.nn.fastmath import on_cpu

        if on_cpu():
            return None
        made = self.__dict__.get("_mlx_decoder")
        if made is None:
            from ttscli.lm import MLXCodeDecoder

            made = MLXCodeDecoder(self)
            object.__setattr__(self, "_mlx_decoder", made)
        return made

    def prompt(self, text_ids: list[int], prompt_speech: list[int]) -> mx.array:
        """The prefill embeddings ``[1, L, H]`` (upstream ``Qwen2LM.inference``)."""
        w = self.speech_embedding.weight
        parts = [w[self.sos][None], self.backbone.embed_tokens(mx.array(text_ids, dtype=mx.int32)),
                 w[self.task_id][None]]
        if prompt_speech:
            parts.append(self.speech_embedding(mx.array(prompt_speech, dtype=mx.int32)))
        return mx.concatenate(parts)[None]

    def logp(self, hidden: mx.array) -> mx.array:
        """Log-probabilities over the ``speech_token_size + 200`` ids of the last position."""
        return self.log_softmax(self.llm_decoder(hidden[:, -1]))

    @staticmethod
    def log_softmax(logits: mx.array) -> mx.array:
        logits = logits.astype(mx.float32)
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    def generate(self, embeds: mx.array, draw: Draw, min_len: int, max_len: int,
                 ignore_eos: bool = False) -> Iterator[int]:
        """Speech tokens until a stop id; past ``max_len`` tokens a LimitReached (never a cut).
        ``ignore_eos`` (benchmarks): stops are masked, ``max_len`` tokens come and no error."""
        decoder = self.step_decoder()
        if decoder is not None:
            cache = decoder.new_cache()
            logits, _ = decoder.prefill(embeds, cache)
        else:
            cache = self.backbone.make_cache()
            h = self.backbone(input_embeddings=embeds, cache=cache)
        out: list[int] = []
        while True:
            logp = self.log_softmax(logits) if decoder is not None else self.logp(h)
            tok = self.choose(np.array(logp[0]), out, draw, min_len, max_len, ignore_eos)
            if tok is None:
                return
            out.append(tok)
            yield tok
            if decoder is not None:
                logits, _ = decoder.step(self.embed(tok), cache)
            else:
                h = self.backbone(input_embeddings=self.embed(tok), cache=cache)

    def embed(self, tok: int) -> mx.array:
        """A drawn speech token as the next step's input ``[1, 1, H]``."""
        return self.speech_embedding.weight[tok][None, None]

    def choose(self, logp: np.ndarray, out: list[int], draw: Draw, min_len: int, max_len: int,
               ignore_eos: bool = False) -> int | None:
        """The token after ``out`` from one row's log-probabilities (changed in place): None at a
        stop id (or at ``max_len`` under ``ignore_eos``), a LimitReached when a token would pass
        ``max_len``. One place for the single loop and the batched rows, so both stop alike."""
        n = self.args.speech_token_size
        if len(out) < min_len:
            logp[n] = -np.inf
        if ignore_eos:
            logp[n:] = -np.inf
        tok = ras_sample(logp, out, draw)
        if tok >= n:
            return None
        if len(out) == max_len:
            if ignore_eos:
                return None
            raise LimitReached(f"CosyVoice3's LM reached its limit of {max_len} speech tokens "
                               f"({max_len / self.args.token_frame_rate:.1f} s) without ending; raise it with "
                               "--max-frames (`max_frames` in a server request), or split the text")
        return tok
