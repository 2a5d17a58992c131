"""The MLX decoder-only LM at tiny size: the equations against a float64 numpy reference,
checkpoint names against transformers' own models, and cache / batch invariants."""
from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten

from ttscli.lm import (
    CodeDecoder,
    ConcatCache,
    DecoderLM,
    LMArgs,
    MLXCodeDecoder,
    make_cache,
)
from ttscli.lm.rope import inv_freq

GOLD = np.load(Path(__file__).resolve().parents[1] / "fixtures" / "lm" / "rope.npz")
TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
            num_hidden_layers=2, vocab_size=50, rms_norm_eps=1e-5)
# Chatterbox T3's scaling at a context short enough for the tiny positions to cross its bands
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def build(model_type: str = "llama", bias: bool = False, seed: int = 0, **extra) -> DecoderLM:
    cfg = dict(TINY, model_type=model_type, attention_bias=bias, rope_theta=10000.0, **extra)
    m = DecoderLM(LMArgs.from_hf(cfg))
    # norms away from 1 and biases away from 0, so a dropped weight shows
    rng = np.random.default_rng(seed)
    params = {k: mx.array((1.0 + 0.2 * rng.standard_normal(v.shape)) if k.endswith("norm.weight")
                          else rng.standard_normal(v.shape) * (0.5 if k.endswith("bias") or "embed" in k
                                                               else v.shape[-1] ** -0.5), mx.float32)
              for k, v in tree_flatten(m.parameters())}
    m.load_weights(list(params.items()))
    mx.eval(m.parameters())
    return m


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rotate(x, ang):
    half = x.shape[-1] // 2
    c, s = np.cos(ang), np.sin(ang)
    return np.concatenate([x[..., :half] * c - x[..., half:] * s, x[..., half:] * c + x[..., :half] * s], -1)


def reference(m: DecoderLM, ids: np.ndarray) -> np.ndarray:
    """float64 numpy forward of the same equations (pre-norm blocks, GQA, RoPE, SwiGLU)."""
    a = m.args
    p = {k: np.array(v, dtype=np.float64) for k, v in tree_flatten(m.parameters())}
    B, L = ids.shape
    nh, nkv, d = a.num_attention_heads, a.num_key_value_heads, a.head_dim
    ang = np.arange(L)[:, None] * inv_freq(a.rope, d)[None]
    causal = np.triu(np.full((L, L), -np.inf), 1)

    def lin(x, name):
        y = x @ p[name + ".weight"].T
        return y + p[name + ".bias"] if name + ".bias" in p else y

    h = p["embed_tokens.weight"][ids]
    for i in range(a.num_hidden_layers):
        pre = f"layers.{i}."
        x = rms(h, p[pre + "input_layernorm.weight"], a.rms_norm_eps)
        q = lin(x, pre + "self_attn.q_proj").reshape(B, L, nh, d).transpose(0, 2, 1, 3)
        k = lin(x, pre + "self_attn.k_proj").reshape(B, L, nkv, d).transpose(0, 2, 1, 3)
        v = lin(x, pre + "self_attn.v_proj").reshape(B, L, nkv, d).transpose(0, 2, 1, 3)
        if a.qk_norm:
            q = rms(q, p[pre + "self_attn.q_norm.weight"], a.rms_norm_eps)
            k = rms(k, p[pre + "self_attn.k_norm.weight"], a.rms_norm_eps)
        q, k = rotate(q, ang), rotate(k, ang)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + causal
        w = np.exp(s - s.max(-1, keepdims=True))
        o = (w / w.sum(-1, keepdims=True)) @ v
        h = h + lin(o.transpose(0, 2, 1, 3).reshape(B, L, nh * d), pre + "self_attn.o_proj")
        x = rms(h, p[pre + "post_attention_layernorm.weight"], a.rms_norm_eps)
        g = lin(x, pre + "mlp.gate_proj")
        h = h + lin(g / (1 + np.exp(-g)) * lin(x, pre + "mlp.up_proj"), pre + "mlp.down_proj")
    return rms(h, p["norm.weight"], a.rms_norm_eps)


IDS = np.random.default_rng(1).integers(0, TINY["vocab_size"], (2, 40))


@pytest.mark.parametrize("model_type, bias, scaling", [
    ("llama", False, LLAMA3),        # Chatterbox T3 / Breeze depth decoder shape: no q/k norm, llama3 RoPE
    ("llama", True, None),           # attention biases
    ("qwen3", False, None),          # Qwen3: per-head q/k RMSNorm
])
def test_stack_matches_float64_reference(model_type, bias, scaling):
    m = build(model_type, bias, rope_scaling=scaling)
    assert m.args.qk_norm == (model_type == "qwen3")
    if scaling:
        assert m.args.rope.type == "llama3"
    got = np.array(m(mx.array(IDS)))
    want = reference(m, IDS)
    assert np.abs(want).max() > 1.0
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_parameter_names_are_the_transformers_names(model_type):
    got = sorted(f"{k}:{list(v.shape)}" for k, v in tree_flatten(DecoderLM(LMArgs.from_hf(
        dict(TINY, model_type=model_type))).parameters()))
    assert got == GOLD[f"{model_type}_params"].tolist()


def test_embeddings_in_place_of_ids():
    m = build()
    emb = m.embed_tokens(mx.array(IDS))
    np.testing.assert_array_equal(np.array(m(input_embeddings=emb)), np.array(m(mx.array(IDS))))


@pytest.mark.parametrize("cache_kind", ["kv", "concat"])
def test_prefill_then_steps_equal_one_forward(cache_kind):
    """Prefill 9, one chunk of 4 on top of the cache (a causal mask aligned to the keys' end),
    then single steps: the same hidden states as one full forward. KVCache grows in blocks of 4
    here, so its re-allocation is crossed several times."""
    m = build(rope_scaling=LLAMA3)
    ids = mx.array(IDS[:1, :20])
    full = np.array(m(ids))
    cache = make_cache(len(m.layers), step=4) if cache_kind == "kv" else [ConcatCache() for _ in m.layers]
    parts = [m(ids[:, :9], cache), m(ids[:, 9:13], cache)]
    parts += [m(ids[:, t:t + 1], cache) for t in range(13, 20)]
    assert cache[0].offset == 20
    np.testing.assert_allclose(np.array(mx.concatenate(parts, axis=1)), full, atol=2e-5)


def test_a_batch_of_two_rows_equals_each_row_alone():
    """Chatterbox's classifier-free guidance runs its two rows as one batch."""
    m = build(rope_scaling=LLAMA3)
    ids = mx.array(IDS[:, :16])
    batch_cache = m.make_cache()
    batch = [m(ids[:, :10], batch_cache)] + [m(ids[:, t:t + 1], batch_cache) for t in range(10, 16)]
    batch = np.array(mx.concatenate(batch, axis=1))
    for r in range(2):
        cache = m.make_cache()
        alone = [m(ids[r:r + 1, :10], cache)] + [m(ids[r:r + 1, t:t + 1], cache) for t in range(10, 16)]
        np.testing.assert_allclose(batch[r:r + 1], np.array(mx.concatenate(alone, axis=1)), atol=2e-5)
    assert np.abs(batch[0] - batch[1]).max() > 0.1     # the rows differ, so the check means something


class HeadModel(nn.Module):
    """The LMHeadModel a family hands to MLXCodeDecoder: embeddings in, last logits + hidden out."""

    def __init__(self, lm: DecoderLM):
        super().__init__()
        self.model = lm
        self.head = nn.Linear(lm.args.hidden_size, 7, bias=False)

    def new_cache(self):
        return self.model.make_cache()

    def __call__(self, embeds, cache):
        h = self.model(cache=cache, input_embeddings=embeds)[:, -1]
        return self.head(h), h

    def step_parts(self):
        return self.model, self.head


def test_mlx_code_decoder_sequential_prefill_equals_batched():
    m = build(model_type="qwen3")
    dec, seq = MLXCodeDecoder(HeadModel(m)), MLXCodeDecoder(HeadModel(m), sequential=True)
    seq.model.head = dec.model.head
    assert isinstance(dec, CodeDecoder)
    emb = m.embed_tokens(mx.array(IDS[:, :12]))
    c1, c2 = dec.new_cache(), seq.new_cache()
    for a, b in zip(dec.prefill(emb, c1), seq.prefill(emb, c2)):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=2e-5)
    nxt = m.embed_tokens(mx.array(IDS[:, 12:13]))
    for a, b in zip(dec.step(nxt, c1), seq.step(nxt, c2)):
        np.testing.assert_allclose(np.array(a), np.array(b), atol=2e-5)
    assert c1[0].offset == c2[0].offset == 13
