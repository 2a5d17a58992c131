"""The code predictor ("sub-talker"): codebooks 1..15 of a frame, one at a time.

Per frame it starts from an empty cache at position 0, prefills ``[h_t, E0(c0)]`` (the talker's
last hidden state and its codebook-0 embedding), samples c1 from ``lm_head[0]``, then feeds
``codec_embedding[j-2](c_{j-1})`` for j = 2..15.  All 16 positions have fixed shapes, so the
whole frame (15 forwards + on-device sampling) is one function that :func:`mx.compile` traces
once and replays every frame without host syncs.

``small_to_mtp_projection`` exists only when the talker is wider than the predictor (1.7B).
"""
from __future__ import annotations

from typing import Callable

import mlx.core as mx
import mlx.nn as nn

from ttscli.lm import ConcatCache, DecoderLM, LMArgs, RopeArgs
from ttscli.lm.sample import SamplingParams, sample
from ttscli.models.qwen3_tts.config import CodePredictorArgs


def lm_args(a: CodePredictorArgs) -> LMArgs:
    """The predictor's Qwen3 stack (q/k norm, plain RoPE) as the shared LM arguments."""
    return LMArgs(hidden_size=a.hidden_size, num_hidden_layers=a.num_hidden_layers,
                  num_attention_heads=a.num_attention_heads, intermediate_size=a.intermediate_size,
                  num_key_value_heads=a.num_key_value_heads, head_dim=a.head_dim, rms_norm_eps=a.rms_norm_eps,
                  vocab_size=a.vocab_size, attention_bias=a.attention_bias, qk_norm=True,
                  rope=RopeArgs(theta=a.rope_theta))


class CodePredictorModel(DecoderLM):
    """``talker.code_predictor.model``: the stack plus one input embedding per codebook 1..15
    (at the talker's width; ``small_to_mtp_projection`` maps them down when narrower)."""

    def __init__(self, a: CodePredictorArgs, embedding_dim: int):
        super().__init__(lm_args(a), embed_tokens=False)
        self.codec_embedding = [nn.Embedding(a.vocab_size, embedding_dim)
                                for _ in range(a.num_code_groups - 1)]


class CodePredictor(nn.Module):
    # the whole frame as one CUDA kernel where MLX runs on CUDA (None: wherever it can, False: never)
    one_kernel_frame: bool | None = None

    def __init__(self, a: CodePredictorArgs, talker_hidden: int):
        super().__init__()
        self.args = a
        self.model = CodePredictorModel(a, talker_hidden)
        self.lm_head = [nn.Linear(a.hidden_size, a.vocab_size, bias=False)
                        for _ in range(a.num_code_groups - 1)]
        if a.hidden_size != talker_hidden:
            self.small_to_mtp_projection = nn.Linear(talker_hidden, a.hidden_size, bias=True)
        # a plain attribute, not a child of the parameter tree
        object.__setattr__(self, "_compiled", {})

    def project(self, x: mx.array) -> mx.array:
        if "small_to_mtp_projection" in self:
            return self.small_to_mtp_projection(x)
        return x

    def frame(self, hidden: mx.array, c0_embed: mx.array, params: SamplingParams,
              keys: mx.array | None) -> tuple[mx.array, mx.array]:
        """Codes 1..15 for one frame and the summed embedding of all 16 codes.

        ``hidden [B, H]`` is the talker's post-norm state, ``c0_embed [B, H]`` its codebook-0
        embedding; ``keys [15, 2]`` one PRNG key per draw (ignored when greedy).
        Returns ``codes [B, 15] int32`` and ``frame_embed [B, H]`` (lazy).
        """
        return self.frame_with(hidden, c0_embed,
                               lambda j, logits: sample(logits, params, None if keys is None else keys[j]))

    def frame_with(self, hidden: mx.array, c0_embed: mx.array,
                   draw: Callable[[int, mx.array], mx.array]) -> tuple[mx.array, mx.array]:
        """:meth:`frame` with ``draw(j, logits [B, V]) -> codes [B]`` choosing codebook ``j + 1``
        (batched rows each sample with their own params and keys)."""
        cache = [ConcatCache() for _ in self.model.layers]
        x = mx.stack([hidden, c0_embed], axis=1)
        total = c0_embed
        codes = []
        n = len(self.lm_head)
        for j in range(n):
            h = self.model(cache=cache, input_embeddings=self.project(x))[:, -1, :]
            code = draw(j, self.lm_head[j](h))
            codes.append(code)
            e = self.model.codec_embedding[j](code)
            total = total + e
            if j + 1 < n:
                x = e[:, None, :]
        return mx.stack(codes, axis=1), total

    def reset_compiled(self) -> None:
        """Forget traced frames (their weights are baked in): call after changing weights."""
        self._compiled.clear()

    def compiled_frame(self, params: SamplingParams) -> Callable:
        """``frame`` compiled for these sampling params (traced on first use, then replayed).

        On MLX's CUDA backend the frame is one kernel of ours where it can be
        (:mod:`ttscli.models.qwen3_tts.cuda_frame`; ``one_kernel_frame``), the compiled MLX frame elsewhere."""
        fn = self._compiled.get(params)
        if fn is None:
            fn = self._mlx_frame(params)
            if self.one_kernel_frame is not False:
                from ttscli.models.qwen3_tts import cuda_frame

                if cuda_frame.unsupported(self, params) is None:
                    fn = cuda_frame.CodeFrameKernel(self, params, fallback=fn)
            self._compiled[params] = fn
        return fn

    def _mlx_frame(self, params: SamplingParams) -> Callable:
        if params.greedy:
            return mx.compile(lambda h, e: self.frame(h, e, params, None))
        return mx.compile(lambda h, e, k: self.frame(h, e, params, k))
