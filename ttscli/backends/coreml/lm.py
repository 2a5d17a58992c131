"""MIL program of a decoder-only LM (Qwen3, Qwen2, Llama or MiniCPM blocks) that runs one position
per call.

The KV cache is Core ML state (``key_cache`` / ``value_cache``, fp16, ``[layers, kv_heads,
capacity, head_dim]``). A call writes the new key/value at ``position`` and attends to slots
``0..position``: the mask comes from the position, so stale slots past it never need clearing.

The stack is described by :class:`ttscli.lm.config.LMArgs`; its tensors are passed with the
checkpoint's names relative to the stack (``layers.0.self_attn.q_proj.weight``, ``norm.weight``),
so any family hands over its LM by choosing a prefix. RoPE angles are tabulated in float64 at
build time and gathered by position: ``position * inv_freq`` computed in fp16 on device would
be off by ~0.1 rad at position 256. LongRoPE's frequencies are tabulated the same way (its
cos/sin scaling goes into the attention scale, as in ttscli.lm); a stack without RoPE (MiniCPM's
residual LM in VoxCPM2) attends unrotated; MiniCPM's muP branch scale multiplies each sublayer's
output before its residual add.

A :class:`~ttscli.backends.blocks.Style` builds Kyutai's block instead (LayerNorm with a bias,
a tanh-GELU MLP, RoPE on adjacent pairs). Adjacent-pair RoPE is rotate-half RoPE on q and k
whose dimensions are reordered (even ones first, then odd ones, per head): the export reorders
the rows of the q and k projections, which leaves every attention score as it was, so the
rotate-half program runs such a stack; the keys in ``key_cache`` are then in that order.
"""
from __future__ import annotations

import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from ttscli.backends.blocks import Style, style_shapes
from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs, RopeArgs
from ttscli.lm.rope import inv_freq

# Additive mask value: large enough to zero a softmax term, small enough to stay finite in fp16.
MASK_NEG = -30000.0


def f32(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def cache_shape(args: LMArgs, capacity: int) -> tuple[int, int, int, int]:
    return (args.num_hidden_layers, args.num_key_value_heads, capacity, args.head_dim)


def rope_tables(capacity: int, head_dim: int, rope: RopeArgs) -> tuple[np.ndarray, np.ndarray]:
    """cos and signed sin ``[capacity, head_dim]`` for rotate-half RoPE:
    rope(x) = x * cos + swap_halves(x) * sin_signed, with sin_signed = [-sin, sin].

    The frequencies are the MLX stack's (ttscli.lm.rope). M-RoPE rotates like plain RoPE here:
    a one-position step of a codec LM feeds the same position to its three rows.
    """
    ang = np.arange(capacity, dtype=np.float64)[:, None] * inv_freq(rope, head_dim)[None, :]
    cos = np.cos(np.concatenate([ang, ang], axis=1))
    sin = np.sin(ang)
    return cos.astype(np.float32), np.concatenate([-sin, sin], axis=1).astype(np.float32)


def rms_norm(x, weight: np.ndarray, eps: float, name: str):
    """RMSNorm over the last axis, scaled by max|x| first so x**2 cannot overflow fp16:
    x / sqrt(mean(x^2) + eps) == (x/s) / sqrt(mean((x/s)^2) + eps/s^2) for any s > 0."""
    s = mb.maximum(x=mb.reduce_max(x=mb.abs(x=x), axes=[-1], keep_dims=True), y=np.float32(1e-4))
    xs = mb.real_div(x=x, y=s)
    ms = mb.reduce_mean(x=mb.mul(x=xs, y=xs), axes=[-1], keep_dims=True)
    inv = mb.rsqrt(x=mb.add(x=ms, y=mb.real_div(x=np.float32(eps), y=mb.mul(x=s, y=s))))
    return mb.mul(x=mb.mul(x=xs, y=inv), y=f32(weight), name=name)


def layer_norm(x, weight: np.ndarray, bias: np.ndarray, eps: float, name: str):
    """LayerNorm over the last axis, scaled by max|x| first as :func:`rms_norm` is (fp16 range)."""
    s = mb.maximum(x=mb.reduce_max(x=mb.abs(x=x), axes=[-1], keep_dims=True), y=np.float32(1e-4))
    xs = mb.real_div(x=x, y=s)
    c = mb.sub(x=xs, y=mb.reduce_mean(x=xs, axes=[-1], keep_dims=True))
    var = mb.reduce_mean(x=mb.mul(x=c, y=c), axes=[-1], keep_dims=True)
    inv = mb.rsqrt(x=mb.add(x=var, y=mb.real_div(x=np.float32(eps), y=mb.mul(x=s, y=s))))
    return mb.add(x=mb.mul(x=mb.mul(x=c, y=inv), y=f32(weight)), y=f32(bias), name=name)


def norm(x, w: dict, key: str, eps: float, style: Style, name: str):
    """The block's norm of ``x`` with tensors ``key.weight`` (and ``key.bias``)."""
    if style.norm == "layer":
        return layer_norm(x, w[key + ".weight"], w[key + ".bias"], eps, name)
    return rms_norm(x, w[key + ".weight"], eps, name)


def pairs_to_halves(w: dict, args: LMArgs) -> dict:
    """q and k projections (and biases) with each head's dimensions reordered even-first, so
    rotate-half RoPE rotates the pairs (2i, 2i+1) adjacent-pair RoPE does (module docstring)."""
    d = args.head_dim
    order = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    out = dict(w)
    for i in range(args.num_hidden_layers):
        for proj, heads in (("q_proj", args.num_attention_heads), ("k_proj", args.num_key_value_heads)):
            rows = (np.arange(heads)[:, None] * d + order[None, :]).reshape(-1)
            for kind in ("weight", "bias"):
                key = f"layers.{i}.self_attn.{proj}.{kind}"
                if key in out:
                    out[key] = np.asarray(out[key])[rows]
    return out


def linear(x, w: dict, key: str, name: str | None = None):
    kw = {"x": x, "weight": f32(w[key + ".weight"])}
    if key + ".bias" in w:
        kw["bias"] = f32(w[key + ".bias"])
    if name is not None:
        kw["name"] = name
    return mb.linear(**kw)


def apply_rope(x, cos, sin_signed, head_dim: int):
    """x: [heads, head_dim]; cos / sin_signed: [1, head_dim]."""
    half, n = head_dim // 2, x.shape[0]
    x1 = mb.slice_by_index(x=x, begin=[0, 0], end=[n, half])
    x2 = mb.slice_by_index(x=x, begin=[0, half], end=[n, head_dim])
    return mb.add(x=mb.mul(x=x, y=cos), y=mb.mul(x=mb.concat(values=[x2, x1], axis=1), y=sin_signed))


def _write_slot(cache, state, value, layer: int, position, args: LMArgs):
    """cache[layer, :, position, :] = value; returns the updated cache value."""
    d, nkv = args.head_dim, args.num_key_value_heads
    upd = mb.cast(x=mb.reshape(x=value, shape=[1, nkv, 1, d]), dtype="fp16")
    begin = mb.concat(values=[np.array([layer, 0], np.int32), position, np.array([0], np.int32)], axis=0)
    end = mb.concat(values=[np.array([layer + 1, nkv], np.int32), mb.add(x=position, y=np.int32(1)),
                            np.array([d], np.int32)], axis=0)
    cache = mb.slice_update(x=cache, update=upd, begin=begin, end=end)
    mb.coreml_update_state(state=state, value=cache)
    return cache


def _layer_slice(cache, layer: int, args: LMArgs, capacity: int):
    d, nkv = args.head_dim, args.num_key_value_heads
    kv = mb.slice_by_index(x=cache, begin=[layer, 0, 0, 0], end=[layer + 1, nkv, capacity, d])
    return mb.cast(x=mb.reshape(x=kv, shape=[nkv, capacity, d]), dtype="fp32")


def decoder_layer(x, w: dict, i: int, args: LMArgs, capacity: int, position, cos, sin_signed, mask,
                  caches: dict, style: Style):
    """One pre-norm block for one position; x: [1, H]."""
    d, nh, nkv, eps = args.head_dim, args.num_attention_heads, args.num_key_value_heads, args.rms_norm_eps
    p = f"layers.{i}."
    h = norm(x, w, p + "input_layernorm", eps, style, name=f"l{i}_in_norm")
    q = mb.reshape(x=linear(h, w, p + "self_attn.q_proj"), shape=[nh, d])
    k = mb.reshape(x=linear(h, w, p + "self_attn.k_proj"), shape=[nkv, d])
    v = mb.reshape(x=linear(h, w, p + "self_attn.v_proj"), shape=[nkv, d])
    if args.qk_norm:
        q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps, f"l{i}_q_norm")
        k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps, f"l{i}_k_norm")
    if cos is not None:               # a stack without RoPE (rope.type "none") attends unrotated
        q, k = apply_rope(q, cos, sin_signed, d), apply_rope(k, cos, sin_signed, d)

    caches["k"] = _write_slot(caches["k"], caches["k_state"], k, i, position, args)
    caches["v"] = _write_slot(caches["v"], caches["v_state"], v, i, position, args)
    keys = _layer_slice(caches["k"], i, args, capacity)           # [nkv, C, d]
    values = _layer_slice(caches["v"], i, args, capacity)

    # GQA without repeating K/V: the query heads of one kv group share a batch entry.
    scores = mb.matmul(x=mb.reshape(x=q, shape=[nkv, nh // nkv, d]), y=keys, transpose_y=True)
    # LongRoPE past its original context scales cos/sin, so the logits by the factor's square
    scale = np.float32(d ** -0.5 * args.rope.attention_factor() ** 2)
    probs = mb.softmax(x=mb.add(x=mb.mul(x=scores, y=scale), y=mask), axis=-1)
    attn = mb.reshape(x=mb.matmul(x=probs, y=values), shape=[1, nh * d])
    x = mb.add(x=x, y=branch(linear(attn, w, p + "self_attn.o_proj"), args))

    h = norm(x, w, p + "post_attention_layernorm", eps, style, name=f"l{i}_post_norm")
    if style.mlp == "gelu_tanh":
        act = mb.gelu(x=linear(h, w, p + "mlp.up_proj"), mode="TANH_APPROXIMATION")
    else:
        act = mb.mul(x=mb.silu(x=linear(h, w, p + "mlp.gate_proj")), y=linear(h, w, p + "mlp.up_proj"))
    return mb.add(x=x, y=branch(linear(act, w, p + "mlp.down_proj"), args), name=f"l{i}_out")


def branch(y, args: LMArgs):
    """A sublayer's output as it joins the residual stream: times ``args.residual_scale``
    (MiniCPM's muP depth scaling), or as it is where that is 1."""
    return y if args.residual_scale == 1.0 else mb.mul(x=y, y=np.float32(args.residual_scale))


def check_stack(args: LMArgs, w: dict, head: np.ndarray | None, style: Style | None = None) -> None:
    from ttscli.checkpoint import weight_problems

    problems = weight_problems(style_shapes(args, style or Style()), {k: np.shape(v) for k, v in w.items()})
    if head is not None and (head.ndim != 2 or head.shape[1] != args.hidden_size):
        problems.append(f"head {list(head.shape)} (expected [vocab, {args.hidden_size}])")
    if problems:
        raise CheckpointError("LM tensors for the Core ML export: " + "; ".join(problems))


def build_step_program(args: LMArgs, w: dict, capacity: int, head: np.ndarray | None = None, opset=None,
                       style: Style | None = None, head_bias: np.ndarray | None = None,
                       head_norm: tuple[np.ndarray, np.ndarray, float] | None = None):
    """The one-position program of the stack ``args`` with tensors ``w`` (names relative to the
    stack) and an optional output head ``[vocab, H]`` (with ``head_bias [vocab]``); ``style``:
    the block's flavour. ``head_norm`` (LayerNorm weight, bias, eps): a norm of the family's own
    between the stack's final norm and the head (IndexTTS2's ``final_norm``); ``hidden`` is then
    taken after it.

    Inputs: ``inputs_embeds`` fp32 [1, 1, H], ``position`` int32 [1]. Outputs: ``hidden`` fp32
    [1, H] after the final norm, and ``logits`` fp32 [1, vocab] when there is a head.
    States: ``key_cache`` / ``value_cache`` fp16 :func:`cache_shape`.
    """
    import coremltools as ct

    style = style or Style()
    check_stack(args, w, head, style)
    if style.rope_interleaved:
        w = pairs_to_halves(w, args)
    H = args.hidden_size
    shape = cache_shape(args, capacity)
    specs = [mb.TensorSpec((1, 1, H), dtype=types.fp32), mb.TensorSpec((1,), dtype=types.int32),
             mb.StateTensorSpec(shape, dtype=types.fp16), mb.StateTensorSpec(shape, dtype=types.fp16)]
    rotary = args.rope.type != "none"
    cos_t, sin_t = rope_tables(capacity, args.head_dim, args.rope) if rotary else (None, None)
    slots = np.arange(capacity, dtype=np.int32)

    @mb.program(input_specs=specs, opset_version=opset or ct.target.iOS18)
    def prog(inputs_embeds, position, key_cache, value_cache):
        x = mb.reshape(x=inputs_embeds, shape=[1, H])
        cos = mb.gather(x=cos_t, indices=position, axis=0) if rotary else None         # [1, d]
        sin_signed = mb.gather(x=sin_t, indices=position, axis=0) if rotary else None
        # scalar branches, broadcast: a [capacity] zeros constant would be merged with the zero bias
        # coremltools gives a k/v projection of that width, and int8 weights then refuse the shared constant
        mask = mb.select(cond=mb.less_equal(x=slots, y=position), a=np.float32(0.0), b=np.float32(MASK_NEG))
        caches = {"k": mb.read_state(input=key_cache), "v": mb.read_state(input=value_cache),
                  "k_state": key_cache, "v_state": value_cache}
        for i in range(args.num_hidden_layers):
            x = decoder_layer(x, w, i, args, capacity, position, cos, sin_signed, mask, caches, style)
        if head_norm is None:
            hidden = norm(x, w, "norm", args.rms_norm_eps, style, name="hidden")
        else:
            gamma, beta, eps = head_norm
            hidden = layer_norm(norm(x, w, "norm", args.rms_norm_eps, style, name="stack_out"), gamma, beta, eps,
                                name="hidden")
        if head is None:
            return hidden
        kw = {} if head_bias is None else {"bias": f32(head_bias)}
        return mb.linear(x=hidden, weight=f32(head), name="logits", **kw), hidden

    return prog
