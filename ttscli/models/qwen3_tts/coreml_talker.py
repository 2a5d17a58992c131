"""Core ML (MIL) programs for the Qwen3-TTS talker and code predictor: one position per call.

Both are Qwen3 decoder stacks whose KV cache is Core ML state (``key_cache`` / ``value_cache``,
fp16, ``[layers, kv_heads, capacity, head_dim]``). A call writes the new key/value at
``position`` and attends to slots ``0..position``: masking comes from the position, so stale
slots beyond it never need clearing (the code predictor reuses one state for every frame).

RoPE angles are tabulated in float64 at build time and gathered by position: computing
``position * inv_freq`` in fp16 on device would lose ~0.1 rad at position 256.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

# Additive mask value: large enough to zero a softmax term, small enough to stay finite in fp16.
MASK_NEG = -30000.0
# Name prefix of the gather that picks one code-predictor head; 8-bit export quantizes its table.
HEADS_GATHER = "cp_heads"


@dataclass(frozen=True)
class LMDims:
    """Shape of one Qwen3 decoder stack (talker or code predictor)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float


def f32(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def rms_norm(x, weight: np.ndarray, eps: float, name: str):
    """RMSNorm over the last axis, scaled by max|x| first so x**2 cannot overflow fp16.

    x / sqrt(mean(x^2) + eps) == (x/s) / sqrt(mean((x/s)^2) + eps/s^2) for any s > 0.
    """
    s = mb.reduce_max(x=mb.abs(x=x), axes=[-1], keep_dims=True)
    s = mb.maximum(x=s, y=np.float32(1e-4))
    xs = mb.real_div(x=x, y=s)
    ms = mb.reduce_mean(x=mb.mul(x=xs, y=xs), axes=[-1], keep_dims=True)
    eps_s = mb.real_div(x=np.float32(eps), y=mb.mul(x=s, y=s))
    inv = mb.rsqrt(x=mb.add(x=ms, y=eps_s))
    return mb.mul(x=mb.mul(x=xs, y=inv), y=f32(weight), name=name)


def linear(x, weight: np.ndarray, bias: np.ndarray | None = None, name: str | None = None):
    kw = {"x": x, "weight": f32(weight)}
    if bias is not None:
        kw["bias"] = f32(bias)
    if name is not None:
        kw["name"] = name
    return mb.linear(**kw)


def rope_tables(capacity: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and signed sin ``[capacity, head_dim]`` for rotate-half RoPE.

    rope(x) = x*cos + swap_halves(x)*sin_signed, where sin_signed = [-sin, sin].
    """
    half = head_dim // 2
    inv_freq = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    ang = np.arange(capacity, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos = np.cos(np.concatenate([ang, ang], axis=1))
    sin = np.sin(ang)
    sin_signed = np.concatenate([-sin, sin], axis=1)
    assert cos.shape[1] == 2 * half
    return cos.astype(np.float32), sin_signed.astype(np.float32)


def apply_rope(x, cos, sin_signed, head_dim: int):
    """x: [heads, head_dim]; cos/sin_signed: [1, head_dim]."""
    half = head_dim // 2
    n = x.shape[0]
    x1 = mb.slice_by_index(x=x, begin=[0, 0], end=[n, half])
    x2 = mb.slice_by_index(x=x, begin=[0, half], end=[n, head_dim])
    swapped = mb.concat(values=[x2, x1], axis=1)
    return mb.add(x=mb.mul(x=x, y=cos), y=mb.mul(x=swapped, y=sin_signed))


def _write_slot(cache, state, value, layer: int, position, dims: LMDims):
    """cache[layer, :, position, :] = value; returns the updated cache value."""
    d = dims.head_dim
    upd = mb.cast(x=mb.reshape(x=value, shape=[1, dims.num_kv_heads, 1, d]), dtype="fp16")
    begin = mb.concat(values=[np.array([layer, 0], np.int32), position, np.array([0], np.int32)], axis=0)
    end = mb.concat(values=[np.array([layer + 1, dims.num_kv_heads], np.int32),
                            mb.add(x=position, y=np.int32(1)), np.array([d], np.int32)], axis=0)
    cache = mb.slice_update(x=cache, update=upd, begin=begin, end=end)
    mb.coreml_update_state(state=state, value=cache)
    return cache


def _layer_slice(cache, layer: int, dims: LMDims, capacity: int):
    kv = mb.slice_by_index(x=cache, begin=[layer, 0, 0, 0],
                           end=[layer + 1, dims.num_kv_heads, capacity, dims.head_dim])
    return mb.cast(x=mb.reshape(x=kv, shape=[dims.num_kv_heads, capacity, dims.head_dim]), dtype="fp32")


def decoder_layer_step(x, w: dict, i: int, dims: LMDims, capacity: int, position, cos, sin_signed,
                       mask, caches: dict):
    """One Qwen3 layer for one position. x: [1, H]; w: tensors of layer ``i`` (checkpoint names)."""
    d, nh, nkv = dims.head_dim, dims.num_heads, dims.num_kv_heads
    group = nh // nkv
    p = f"layers.{i}."
    h = rms_norm(x, w[p + "input_layernorm.weight"], dims.rms_norm_eps, name=f"l{i}_in_norm")
    q = mb.reshape(x=linear(h, w[p + "self_attn.q_proj.weight"]), shape=[nh, d])
    k = mb.reshape(x=linear(h, w[p + "self_attn.k_proj.weight"]), shape=[nkv, d])
    v = mb.reshape(x=linear(h, w[p + "self_attn.v_proj.weight"]), shape=[nkv, d])
    q = apply_rope(rms_norm(q, w[p + "self_attn.q_norm.weight"], dims.rms_norm_eps, f"l{i}_q_norm"),
                   cos, sin_signed, d)
    k = apply_rope(rms_norm(k, w[p + "self_attn.k_norm.weight"], dims.rms_norm_eps, f"l{i}_k_norm"),
                   cos, sin_signed, d)

    caches["k"] = _write_slot(caches["k"], caches["k_state"], k, i, position, dims)
    caches["v"] = _write_slot(caches["v"], caches["v_state"], v, i, position, dims)
    keys = _layer_slice(caches["k"], i, dims, capacity)         # [nkv, C, d]
    values = _layer_slice(caches["v"], i, dims, capacity)

    # GQA without repeating K/V: query heads of one kv group share a batch entry.
    qg = mb.reshape(x=q, shape=[nkv, group, d])
    scores = mb.matmul(x=qg, y=keys, transpose_y=True)          # [nkv, group, C]
    scores = mb.add(x=mb.mul(x=scores, y=np.float32(d ** -0.5)), y=mask)
    probs = mb.softmax(x=scores, axis=-1)
    attn = mb.reshape(x=mb.matmul(x=probs, y=values), shape=[1, nh * d])
    x = mb.add(x=x, y=linear(attn, w[p + "self_attn.o_proj.weight"]))

    h = rms_norm(x, w[p + "post_attention_layernorm.weight"], dims.rms_norm_eps, name=f"l{i}_post_norm")
    gate = mb.silu(x=linear(h, w[p + "mlp.gate_proj.weight"]))
    up = linear(h, w[p + "mlp.up_proj.weight"])
    return mb.add(x=x, y=linear(mb.mul(x=gate, y=up), w[p + "mlp.down_proj.weight"]), name=f"l{i}_out")


def cache_shape(dims: LMDims, capacity: int) -> tuple[int, int, int, int]:
    return (dims.num_layers, dims.num_kv_heads, capacity, dims.head_dim)


def build_step_program(w: dict, dims: LMDims, capacity: int, input_size: int, head: np.ndarray,
                       in_proj: tuple[np.ndarray, np.ndarray] | None = None, opset=None):
    """A one-position Qwen3 decoder program.

    ``w`` holds the stack's tensors without their prefix (``layers.0.self_attn.q_proj.weight``,
    ``norm.weight``). ``head`` is ``[vocab, H]`` (one head: talker) or ``[n, vocab, H]`` (the code
    predictor's heads, chosen per call by the ``head`` input). ``in_proj`` is an optional
    (weight, bias) applied to the input embedding first (the 1.7B ``small_to_mtp_projection``).
    Inputs: ``inputs_embeds`` fp32 [1,1,input_size], ``position`` int32 [1] (+ ``head`` int32 [1]).
    Outputs: ``logits`` fp32 [1,vocab], ``hidden`` fp32 [1,H] (post-norm).
    """
    import coremltools as ct

    multi_head = head.ndim == 3
    shape = cache_shape(dims, capacity)
    specs = [mb.TensorSpec((1, 1, input_size), dtype=types.fp32),
             mb.TensorSpec((1,), dtype=types.int32)]
    if multi_head:
        specs.append(mb.TensorSpec((1,), dtype=types.int32))
    specs += [mb.StateTensorSpec(shape, dtype=types.fp16), mb.StateTensorSpec(shape, dtype=types.fp16)]
    cos_t, sin_t = rope_tables(capacity, dims.head_dim, dims.rope_theta)
    slots = np.arange(capacity, dtype=np.int32)

    def body(inputs_embeds, position, head_index, key_cache, value_cache):
        x = mb.reshape(x=inputs_embeds, shape=[1, input_size])
        if in_proj is not None:
            x = linear(x, in_proj[0], in_proj[1])
        cos = mb.gather(x=cos_t, indices=position, axis=0)     # [1, d]
        sin_signed = mb.gather(x=sin_t, indices=position, axis=0)
        visible = mb.less_equal(x=slots, y=position)
        mask = mb.select(cond=visible, a=np.zeros(capacity, np.float32),
                         b=np.full(capacity, MASK_NEG, np.float32))
        caches = {"k": mb.read_state(input=key_cache), "v": mb.read_state(input=value_cache),
                  "k_state": key_cache, "v_state": value_cache}
        for i in range(dims.num_layers):
            x = decoder_layer_step(x, w, i, dims, capacity, position, cos, sin_signed, mask, caches)
        hidden = rms_norm(x, w["norm.weight"], dims.rms_norm_eps, name="hidden")
        if multi_head:
            head_w = mb.reshape(x=mb.gather(x=f32(head), indices=head_index, axis=0, name=HEADS_GATHER),
                                shape=list(head.shape[1:]))
            logits = mb.matmul(x=hidden, y=head_w, transpose_y=True, name="logits")
        else:
            logits = linear(hidden, head, name="logits")
        return logits, hidden

    opset = opset or ct.target.iOS18
    if multi_head:
        @mb.program(input_specs=specs, opset_version=opset)
        def prog(inputs_embeds, position, head, key_cache, value_cache):
            return body(inputs_embeds, position, head, key_cache, value_cache)
    else:
        @mb.program(input_specs=specs, opset_version=opset)
        def prog(inputs_embeds, position, key_cache, value_cache):
            return body(inputs_embeds, position, None, key_cache, value_cache)
    return prog
