"""Core ML (MIL) program for the streaming Qwen3-TTS speech decoder: N frames per call, with
every layer's carried context in Core ML state, so successive calls equal one-shot decoding.

State per stream (all fp16, zero at the start, which is exactly the causal zero padding):
  * each causal conv: its last ``(k-1)*dilation`` input samples (``conv_*``);
  * each causal transposed conv (k = 2r, stride r): the ``r`` output samples that overlap the
    next call (``tail_*``), added before the bias;
  * the pre-transformer: per layer the un-rotated keys/values of the last ``window`` frames
    (``key_window`` / ``value_window``). RoPE is applied at each call with positions counted
    inside [window slots | new frames]; attention depends only on position differences, so this
    equals the one-shot absolute positions. The input ``frames_seen`` masks slots that do not
    hold a real frame yet.
"""
from __future__ import annotations

import numpy as np

from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Function, Program, types

from .coreml_decoder import DecoderDims, codebook, snake_beta
from .coreml_talker import MASK_NEG, f32, linear, rms_norm, rope_tables


class _States:
    """Declared state specs (in order) and the builder-time vars bound to them."""

    def __init__(self):
        self.specs: list[tuple[str, tuple[int, ...]]] = []
        self.vars: dict[str, object] = {}

    def add(self, name: str, shape) -> str:
        self.specs.append((name, tuple(int(s) for s in shape)))
        return name

    def read(self, name: str):
        return mb.cast(x=mb.read_state(input=self.vars[name]), dtype="fp32")

    def write(self, name: str, value):
        mb.coreml_update_state(state=self.vars[name], value=mb.cast(x=value, dtype="fp16"))


def _conv(x, w, prefix, st: _States, plan: bool, dilation=1, groups=1):
    """Causal conv of x [1, C, T] continuing the stream: prepend the carried input tail."""
    weight = f32(w[prefix + ".weight"])
    k = weight.shape[-1]
    keep = (k - 1) * dilation
    if keep == 0:
        return mb.conv(x=x, weight=weight, bias=f32(w[prefix + ".bias"]), pad_type="valid", groups=groups)
    name = f"conv_{prefix.replace('.', '_')}"
    if plan:
        st.add(name, (1, x.shape[1], keep))
        return mb.conv(x=x, weight=weight, bias=f32(w[prefix + ".bias"]), pad_type="custom", pad=[keep, 0],
                       dilations=[dilation], groups=groups)
    full = mb.concat(values=[st.read(name), x], axis=2)
    t = full.shape[2]
    st.write(name, mb.slice_by_index(x=full, begin=[0, 0, t - keep], end=[1, x.shape[1], t]))
    return mb.conv(x=full, weight=weight, bias=f32(w[prefix + ".bias"]), pad_type="valid",
                   dilations=[dilation], groups=groups)


def _trans_conv(x, w, prefix, stride, st: _States, plan: bool):
    """Causal transposed conv: output [1, C, T*stride]; the overlap beyond it is carried."""
    weight = f32(w[prefix + ".weight"])
    k = weight.shape[-1]
    y = mb.conv_transpose(x=x, weight=weight, strides=[stride], pad_type="valid")   # [1, C, (T-1)s + k]
    c, n = y.shape[1], x.shape[2] * stride
    over = k - stride
    if over > 0:
        name = f"tail_{prefix.replace('.', '_')}"
        if plan:
            st.add(name, (1, c, over))
        else:
            tail = st.read(name)
            st.write(name, mb.slice_by_index(x=y, begin=[0, 0, n], end=[1, c, n + over]))
            y = mb.add(x=y, y=mb.pad(x=tail, pad=[0, 0, 0, 0, 0, y.shape[2] - over]))
        y = mb.slice_by_index(x=y, begin=[0, 0, 0], end=[1, c, n])
    return mb.add(x=y, y=f32(w[prefix + ".bias"])[None, :, None])


def _transformer(x, w, dims: DecoderDims, frames: int, frames_seen, st: _States, plan: bool):
    p = "pre_transformer."
    nh, d, win, t = dims.num_heads, dims.head_dim, dims.sliding_window, frames
    total = win + t
    cos, sin_signed = rope_tables(total, d, dims.rope_theta)
    q_cos, q_sin = cos[win:], sin_signed[win:]
    shape = (dims.num_layers, nh, win, d)
    if plan:
        st.add("key_window", shape)
        st.add("value_window", shape)
        return None
    # Query i (slot win+i) sees slot j when win+i-window < j <= win+i and slot j holds a real
    # frame: window slots j < win hold frames_seen - win + j, real iff that is >= 0.
    i = np.arange(t)[:, None]
    j = np.arange(total)[None, :]
    band = np.where((j <= win + i) & (j > win + i - dims.sliding_window), 0.0, MASK_NEG).astype(np.float32)
    first_real = mb.sub(x=np.int32(win), y=frames_seen)                     # [1]
    real = mb.logical_or(x=mb.greater_equal(x=np.arange(total, dtype=np.int32), y=first_real),
                         y=np.arange(total) >= win)
    mask = mb.add(x=band, y=mb.select(cond=real, a=np.zeros(total, np.float32),
                                      b=np.full(total, MASK_NEG, np.float32)))
    keys_all = st.read("key_window")
    values_all = st.read("value_window")
    new_keys, new_values = [], []
    x = linear(x, w[p + "input_proj.weight"], w[p + "input_proj.bias"])
    for n in range(dims.num_layers):
        lp = f"{p}layers.{n}."
        h = rms_norm(x, w[lp + "input_layernorm.weight"], dims.rms_norm_eps, name=f"sdec_l{n}_in_norm")

        def heads(name):
            y = mb.reshape(x=linear(h, w[lp + f"self_attn.{name}.weight"]), shape=[t, nh, d])
            return mb.transpose(x=y, perm=[1, 0, 2])                          # [nh, T, d]

        def window(all_, n=n):
            return mb.reshape(x=mb.slice_by_index(x=all_, begin=[n, 0, 0, 0], end=[n + 1, nh, win, d]),
                              shape=[nh, win, d])

        k = mb.concat(values=[window(keys_all), heads("k_proj")], axis=1)      # [nh, win+T, d]
        v = mb.concat(values=[window(values_all), heads("v_proj")], axis=1)
        new_keys.append(mb.slice_by_index(x=k, begin=[0, t, 0], end=[nh, total, d]))
        new_values.append(mb.slice_by_index(x=v, begin=[0, t, 0], end=[nh, total, d]))
        q = _rope(heads("q_proj"), q_cos, q_sin, d)
        k = _rope(k, cos, sin_signed, d)
        scores = mb.add(x=mb.mul(x=mb.matmul(x=q, y=k, transpose_y=True), y=np.float32(d ** -0.5)), y=mask)
        attn = mb.matmul(x=mb.softmax(x=scores, axis=-1), y=v)
        attn = linear(mb.reshape(x=mb.transpose(x=attn, perm=[1, 0, 2]), shape=[t, nh * d]),
                      w[lp + "self_attn.o_proj.weight"])
        x = mb.add(x=x, y=mb.mul(x=attn, y=f32(w[lp + "self_attn_layer_scale.scale"])))
        h = rms_norm(x, w[lp + "post_attention_layernorm.weight"], dims.rms_norm_eps, name=f"sdec_l{n}_post_norm")
        mlp = linear(mb.mul(x=mb.silu(x=linear(h, w[lp + "mlp.gate_proj.weight"])),
                            y=linear(h, w[lp + "mlp.up_proj.weight"])), w[lp + "mlp.down_proj.weight"])
        x = mb.add(x=x, y=mb.mul(x=mlp, y=f32(w[lp + "mlp_layer_scale.scale"])))
    st.write("key_window", mb.stack(values=new_keys, axis=0))
    st.write("value_window", mb.stack(values=new_values, axis=0))
    x = rms_norm(x, w[p + "norm.weight"], dims.rms_norm_eps, name="sdec_final_norm")
    return linear(x, w[p + "output_proj.weight"], w[p + "output_proj.bias"])


def _rope(x, cos, sin_signed, d):
    half = d // 2
    h, t, _ = x.shape
    swapped = mb.concat(values=[mb.slice_by_index(x=x, begin=[0, 0, half], end=[h, t, d]),
                                mb.slice_by_index(x=x, begin=[0, 0, 0], end=[h, t, half])], axis=2)
    return mb.add(x=mb.mul(x=x, y=cos), y=mb.mul(x=swapped, y=sin_signed))


def _body(codes, frames_seen, w, dims: DecoderDims, frames: int, tables, st: _States, plan: bool):
    """The decoder graph; with ``plan`` it only declares the states (shapes need a traced graph)."""
    q, bins = dims.num_quantizers, dims.codebook_size
    table, offsets, proj_first, proj_rest = tables
    dim = table.shape[1]
    c = mb.reshape(x=codes, shape=[q, frames])
    c = mb.maximum(x=mb.minimum(x=c, y=np.int32(bins - 1)), y=np.int32(0))
    emb = mb.gather(x=table, indices=mb.add(x=c, y=offsets), axis=0)
    first = mb.reshape(x=mb.slice_by_index(x=emb, begin=[0, 0, 0], end=[1, frames, dim]), shape=[frames, dim])
    rest = mb.reduce_sum(x=mb.slice_by_index(x=emb, begin=[1, 0, 0], end=[q, frames, dim]), axes=[0],
                         keep_dims=False)
    z = mb.add(x=linear(first, proj_first), y=linear(rest, proj_rest))
    x = mb.expand_dims(x=mb.transpose(x=z, perm=[1, 0]), axes=[0])
    x = _conv(x, w, "pre_conv.conv", st, plan)
    x = mb.reshape(x=mb.transpose(x=x, perm=[0, 2, 1]), shape=[frames, dims.latent_dim])
    y = _transformer(x, w, dims, frames, frames_seen, st, plan)
    x = x if y is None else y
    x = mb.expand_dims(x=mb.transpose(x=x, perm=[1, 0]), axes=[0])
    for i, factor in enumerate(dims.upsampling_ratios):
        x = _trans_conv(x, w, f"upsample.{i}.0.conv", factor, st, plan)
        pre = f"upsample.{i}.1"
        y = _conv(x, w, pre + ".dwconv.conv", st, plan, groups=x.shape[1])
        y = mb.transpose(x=y, perm=[0, 2, 1])
        y = mb.layer_norm(x=y, axes=[-1], gamma=f32(w[pre + ".norm.weight"]), beta=f32(w[pre + ".norm.bias"]),
                          epsilon=1e-6)
        y = mb.gelu(x=linear(y, w[pre + ".pwconv1.weight"], w[pre + ".pwconv1.bias"]), mode="EXACT")
        y = mb.mul(x=linear(y, w[pre + ".pwconv2.weight"], w[pre + ".pwconv2.bias"]), y=f32(w[pre + ".gamma"]))
        x = mb.add(x=x, y=mb.transpose(x=y, perm=[0, 2, 1]))
    x = _conv(x, w, "decoder.0.conv", st, plan)
    for b, rate in enumerate(dims.upsample_rates, start=1):
        bp = f"decoder.{b}.block."
        x = _trans_conv(snake_beta(x, w, bp + "0"), w, bp + "1.conv", rate, st, plan)
        for u, dil in zip((2, 3, 4), (1, 3, 9)):
            y = _conv(snake_beta(x, w, f"{bp}{u}.act1"), w, f"{bp}{u}.conv1.conv", st, plan, dilation=dil)
            y = _conv(snake_beta(y, w, f"{bp}{u}.act2"), w, f"{bp}{u}.conv2.conv", st, plan)
            x = mb.add(x=x, y=y)
    n = len(dims.upsample_rates) + 1
    x = _conv(snake_beta(x, w, f"decoder.{n}"), w, f"decoder.{n + 1}.conv", st, plan)
    x = mb.clip(x=x, alpha=np.float32(-1.0), beta=np.float32(1.0))
    return mb.reshape(x=x, shape=[1, frames * dims.samples_per_frame], name="audio")


def build_stream_decoder_program(w: dict, dims: DecoderDims, frames: int, opset=None):
    """Inputs ``codes`` int32 [1, Q, frames] and ``frames_seen`` int32 [1] (frames decoded before
    this call in the stream); output ``audio`` fp32 [1, frames * samples_per_frame]; states as
    listed in the module docstring. Returns (program, [(state name, shape), ...])."""
    import coremltools as ct

    opset = opset or ct.target.iOS18
    q, bins = dims.num_quantizers, dims.codebook_size
    tables = [codebook(w, "quantizer.rvq_first.vq.layers.0.")]
    tables += [codebook(w, f"quantizer.rvq_rest.vq.layers.{i}.") for i in range(q - 1)]
    tables = (f32(np.concatenate(tables, axis=0)), (np.arange(q, dtype=np.int32) * bins)[:, None],
              w["quantizer.rvq_first.output_proj.weight"][:, :, 0],
              w["quantizer.rvq_rest.output_proj.weight"][:, :, 0])
    plan = _States()
    inputs = [mb.TensorSpec((1, q, frames), dtype=types.int32), mb.TensorSpec((1,), dtype=types.int32)]

    @mb.program(input_specs=inputs, opset_version=opset)
    def planning(codes, frames_seen):
        return _body(codes, frames_seen, w, dims, frames, tables, plan, True)

    names = [n for n, _ in plan.specs]
    specs = inputs + [mb.StateTensorSpec(s, dtype=types.fp16) for _, s in plan.specs]
    st = _States()
    st.specs = plan.specs

    params = ["codes", "frames_seen"] + names
    with Function(dict(zip(params, specs)), opset) as func:
        args = [func.inputs[a] for a in params]
        st.vars = dict(zip(names, args[2:]))
        func.set_outputs([_body(args[0], args[1], w, dims, frames, tables, st, False)])
    program = Program()
    program.add_function("main", func)
    return program, plan.specs
