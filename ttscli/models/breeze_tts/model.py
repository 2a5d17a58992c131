"""Breeze TTS 2: text encoder + projection, Qwen3 backbone, llama depth decoder, float32 heads.

Module names are the checkpoint's: ``text_encoder``, ``text_encoder_proj``, ``backbone_model``
(the shared decoder LM, Qwen3 blocks), ``lm_head`` (codebook 0 plus the EOS class) and
``depth_decoder.{model,codebooks_head}``. The one audio table is
``depth_decoder.model.embed_tokens`` ([num_codebooks * vocab, width], codebook k's id c at row
k * vocab + c); the backbone's copy is tied to it and not stored.
"""
from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ttscli.lm import DecoderLM
from ttscli.models.breeze_tts.config import ModelArgs
from ttscli.models.breeze_tts.text_encoder import TextEncoder


class DepthDecoderModel(DecoderLM):
    """``depth_decoder.model``: the audio table, its projection to the stack's width, the stack."""

    def __init__(self, a: ModelArgs):
        super().__init__(a.depth, embed_tokens=False)
        self.embed_tokens = nn.Embedding(a.num_codebooks * a.vocab_size, a.audio_embed_size)
        self.inputs_embeds_projector = nn.Linear(a.audio_embed_size, a.depth.hidden_size, bias=False)


class CodebooksHead(nn.Module):
    """``[num_codebooks - 1, in, out]``, stored input-major: logits of codebook k = h @ weight[k - 1]."""

    def __init__(self, hidden: int, num_codebooks: int, vocab: int):
        super().__init__()
        self.weight = mx.zeros((num_codebooks - 1, hidden, vocab))


class DepthDecoder(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.model = DepthDecoderModel(a)
        self.codebooks_head = CodebooksHead(a.depth.hidden_size, a.num_codebooks, a.vocab_size)


class BreezeModel(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.args = a
        self.text_encoder = TextEncoder(a.text_encoder_config)
        self.text_encoder_proj = nn.Linear(a.text_encoder_config.hidden_size, a.hidden_size, bias=False)
        self.backbone_model = DecoderLM(a.backbone, embed_tokens=False)
        self.lm_head = nn.Linear(a.hidden_size, a.vocab_size + 1, bias=False)
        self.depth_decoder = DepthDecoder(a)

    # ------------------------------------------------------------ embeddings
    @property
    def audio_table(self) -> nn.Embedding:
        return self.depth_decoder.model.embed_tokens

    def embed_frames(self, codes: mx.array) -> mx.array:
        """``codes [..., num_codebooks]`` -> the sum of their codebook embeddings ``[..., H]``."""
        a = self.args
        rows = codes.astype(mx.int32) + mx.arange(a.num_codebooks, dtype=mx.int32) * a.vocab_size
        return self.audio_table(rows).sum(axis=-2)

    def encode_text(self, ids: list[int]) -> mx.array:
        """One text segment (ids incl. its <bos>) -> projected embeddings ``[n, H]``, encoded alone."""
        h = self.text_encoder(mx.array([ids], dtype=mx.int32))
        return self.text_encoder_proj(h)[0]

    # ------------------------------------------------------------ backbone (LMHeadModel protocol)
    def new_cache(self) -> list[Any]:
        return self.backbone_model.make_cache()

    def head(self, h: mx.array) -> mx.array:
        """Backbone logits in float32 (2051 codebook-0 ids + EOS)."""
        return h.astype(mx.float32) @ self.lm_head.weight.astype(mx.float32).T

    def __call__(self, embeds: mx.array, cache: list[Any] | None = None) -> tuple[mx.array, mx.array]:
        h = self.backbone_model(cache=cache, input_embeddings=embeds)[:, -1, :]
        return self.head(h), h

    def step_parts(self):
        """The stack and head of a decode step (for ttscli.lm.cuda_step's one-kernel step; the
        head's float32 product is the kernel's own arithmetic)."""
        return self.backbone_model, self.lm_head

    # ------------------------------------------------------------ depth decoder
    def depth_logits(self, x: mx.array, k: int) -> mx.array:
        """Float32 logits of codebook ``k`` (1..15) from the depth state ``x [B, D]``."""
        w = self.depth_decoder.codebooks_head.weight[k - 1]
        return x.astype(mx.float32) @ w.astype(mx.float32)

    def depth_frame(self, hidden: mx.array, c0: mx.array, pick, cfg_scale: float | None = None
                    ) -> tuple[mx.array, list[mx.array]]:
        """Codebooks 1..15 of one frame, with a fresh depth cache.

        ``hidden [B, H]``: the backbone's post-norm state(s); with ``cfg_scale`` the rows are
        (conditional, unconditional) of ONE utterance, run as a batch of two that shares the
        sampled tokens, and each codebook's logits are ``u + s * (c - u)``. ``c0 [1]``;
        ``pick(logits [1, V], k) -> id [1]`` samples codebook k. Returns ``codes [1, 15]`` and the
        guided logits of each codebook (lazy).
        """
        a = self.args
        dm = self.depth_decoder.model
        B = hidden.shape[0]
        cache = dm.make_cache()
        x = mx.stack([hidden, mx.broadcast_to(self.audio_table(c0), (B, hidden.shape[-1]))], axis=1)
        codes, logits = [], []
        for k in range(1, a.num_codebooks):
            h = dm(cache=cache, input_embeddings=dm.inputs_embeds_projector(x))[:, -1, :]
            z = self.depth_logits(h, k)
            if cfg_scale is not None:
                z = z[1:2] + cfg_scale * (z[0:1] - z[1:2])
            c = pick(z, k)
            codes.append(c)
            logits.append(z)
            if k + 1 < a.num_codebooks:
                e = self.audio_table(c + k * a.vocab_size)
                x = mx.broadcast_to(e, (B, e.shape[-1]))[:, None, :]
        return mx.stack(codes, axis=1), logits
