"""The talker: a Qwen3 decoder over dual-track (text + codec) input embeddings.

Checkpoint prefix ``talker.``: ``model.{text_embedding,codec_embedding,layers,norm}``,
``text_projection.{linear_fc1,linear_fc2}``, ``codec_head`` and ``code_predictor``.

The talker's RoPE is configured as interleaved M-RoPE (sections [24, 20, 20]) but TTS always
feeds three identical position rows, which makes it the plain rotate-half 1-D RoPE (see
:mod:`ttscli.lm.rope`; tests/lm checks this against the upstream talker's rotary code).
"""
from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ttscli.lm import DecoderLM, LMArgs, RopeArgs
from ttscli.models.qwen3_tts.code_predictor import CodePredictor
from ttscli.models.qwen3_tts.config import TalkerArgs


class ResizeMLP(nn.Module):
    """text_projection: Linear -> SiLU -> Linear (both with bias), text width -> talker width."""

    def __init__(self, in_dims: int, hidden: int, out_dims: int):
        super().__init__()
        self.linear_fc1 = nn.Linear(in_dims, hidden, bias=True)
        self.linear_fc2 = nn.Linear(hidden, out_dims, bias=True)

    def __call__(self, x: mx.array) -> mx.array:
        return self.linear_fc2(nn.silu(self.linear_fc1(x)))


def lm_args(a: TalkerArgs) -> LMArgs:
    """The talker's Qwen3 stack (q/k norm) as the shared LM arguments."""
    return LMArgs(hidden_size=a.hidden_size, num_hidden_layers=a.num_hidden_layers,
                  num_attention_heads=a.num_attention_heads, intermediate_size=a.intermediate_size,
                  num_key_value_heads=a.num_key_value_heads, head_dim=a.head_dim, rms_norm_eps=a.rms_norm_eps,
                  vocab_size=a.vocab_size, attention_bias=a.attention_bias, qk_norm=True,
                  rope=RopeArgs.from_hf({"rope_theta": a.rope_theta, "rope_scaling": a.rope_scaling}))


class TalkerModel(DecoderLM):
    """``talker.model``: the Qwen3 stack fed with summed text + codec embeddings."""

    def __init__(self, a: TalkerArgs):
        super().__init__(lm_args(a), embed_tokens=False)
        self.text_embedding = nn.Embedding(a.text_vocab_size, a.text_hidden_size)
        self.codec_embedding = nn.Embedding(a.vocab_size, a.hidden_size)


class Talker(nn.Module):
    def __init__(self, a: TalkerArgs):
        super().__init__()
        self.args = a
        self.model = TalkerModel(a)
        self.text_projection = ResizeMLP(a.text_hidden_size, a.text_hidden_size, a.hidden_size)
        self.codec_head = nn.Linear(a.hidden_size, a.vocab_size, bias=False)
        self.code_predictor = CodePredictor(a.code_predictor_config, a.hidden_size)

    def embed_text(self, ids: mx.array) -> mx.array:
        """Text track: ``text_projection(text_embedding(ids))`` -> ``[..., H]``."""
        return self.text_projection(self.model.text_embedding(ids))

    def embed_codec(self, ids: mx.array) -> mx.array:
        return self.model.codec_embedding(ids)

    def embed_frame(self, codes: mx.array) -> mx.array:
        """Codec track of whole frames: sum of the 16 codebook embeddings, ``codes [..., 16]``."""
        out = self.model.codec_embedding(codes[..., 0])
        for q, emb in enumerate(self.code_predictor.model.codec_embedding):
            out = out + emb(codes[..., q + 1])
        return out

    def new_cache(self) -> list[Any]:
        return self.model.make_cache()

    def step_parts(self):
        """The stack and head of a decode step (for ttscli.lm.cuda_step's one-kernel step)."""
        return self.model, self.codec_head

    def __call__(self, embeds: mx.array, cache: list[Any] | None = None) -> tuple[mx.array, mx.array]:
        """Logits and post-norm hidden state of the LAST position: ``([B, V], [B, H])``."""
        h = self.model(cache=cache, input_embeddings=embeds)[:, -1, :]
        return self.codec_head(h), h
