"""Core ML (MIL) program for the Qwen3-TTS speech decoder (12 Hz codec -> 24 kHz waveform).

A fixed-window decoder: ``codes`` int32 [1, Q, N] -> ``audio`` fp32 [1, N*1920]. Every layer is
causal (left-padded convs, transposed convs trimmed on the right, sliding-window causal
attention), so samples of frame t depend only on frames <= t: a clip shorter than N frames is
right-padded with any code and the tail cut off, and the result equals an unpadded decode.
Longer clips are decoded window by window with left context (see coreml_runtime.py), as the
reference ``chunked_decode`` does. Positions restart at 0 in each window, as in the reference.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from .coreml_talker import MASK_NEG, f32, linear, rms_norm, rope_tables


@dataclass(frozen=True)
class DecoderDims:
    num_quantizers: int
    codebook_size: int
    codebook_dim: int           # RVQ input/output width (512); each codebook is codebook_dim // 2 wide
    latent_dim: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    sliding_window: int
    decoder_dim: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]

    @property
    def samples_per_frame(self) -> int:
        return int(np.prod(self.upsample_rates) * np.prod(self.upsampling_ratios))

    @classmethod
    def from_config(cls, c: dict) -> "DecoderDims":
        return cls(
            num_quantizers=c["num_quantizers"], codebook_size=c["codebook_size"],
            codebook_dim=c["codebook_dim"], latent_dim=c["latent_dim"], hidden_size=c["hidden_size"],
            intermediate_size=c["intermediate_size"], num_layers=c["num_hidden_layers"], num_heads=c["num_attention_heads"],
            head_dim=c.get("head_dim", c["hidden_size"] // c["num_attention_heads"]),
            rms_norm_eps=c["rms_norm_eps"], rope_theta=c["rope_theta"], sliding_window=c["sliding_window"],
            decoder_dim=c["decoder_dim"], upsample_rates=tuple(c["upsample_rates"]),
            upsampling_ratios=tuple(c["upsampling_ratios"]),
        )


def codebook(w: dict, prefix: str) -> np.ndarray:
    """Euclidean codebook as the reference decodes it: embedding_sum / max(cluster_usage, 1e-5)."""
    usage = np.maximum(w[prefix + "_codebook.cluster_usage"].astype(np.float64), 1e-5)
    return (w[prefix + "_codebook.embedding_sum"] / usage[:, None]).astype(np.float32)


def causal_conv(x, w: dict, prefix: str, dilation: int = 1, groups: int = 1):
    """x: [1, C, T]; weight [out, in/groups, k]; zero left pad (k-1)*dilation, no right pad."""
    weight = f32(w[prefix + ".weight"])
    k = weight.shape[-1]
    return mb.conv(x=x, weight=weight, bias=f32(w[prefix + ".bias"]), strides=[1],
                   pad_type="custom", pad=[(k - 1) * dilation, 0], dilations=[dilation], groups=groups)


def causal_trans_conv(x, w: dict, prefix: str, stride: int):
    """ConvTranspose1d (weight [in, out, k]) with the reference's right trim of k - stride."""
    weight = f32(w[prefix + ".weight"])
    k = weight.shape[-1]
    y = mb.conv_transpose(x=x, weight=weight, bias=f32(w[prefix + ".bias"]), strides=[stride],
                          pad_type="valid")
    trim = k - stride
    if trim > 0:
        n, c, t = y.shape
        y = mb.slice_by_index(x=y, begin=[0, 0, 0], end=[n, c, t - trim])
    return y


def snake_beta(x, w: dict, prefix: str):
    """x + 1/(exp(beta)+1e-9) * sin(x*exp(alpha))^2, with alpha/beta stored in log space."""
    alpha = np.exp(w[prefix + ".alpha"].astype(np.float64))
    inv_beta = 1.0 / (np.exp(w[prefix + ".beta"].astype(np.float64)) + 1e-9)
    s = mb.sin(x=mb.mul(x=x, y=f32(alpha)[None, :, None]))
    return mb.add(x=x, y=mb.mul(x=mb.mul(x=s, y=s), y=f32(inv_beta)[None, :, None]))


def _rope_seq(x, cos, sin_signed, head_dim: int):
    """x: [heads, T, d]; cos/sin_signed: [T, d]."""
    half = head_dim // 2
    h, t, _ = x.shape
    x1 = mb.slice_by_index(x=x, begin=[0, 0, 0], end=[h, t, half])
    x2 = mb.slice_by_index(x=x, begin=[0, 0, half], end=[h, t, head_dim])
    swapped = mb.concat(values=[x2, x1], axis=2)
    return mb.add(x=mb.mul(x=x, y=cos), y=mb.mul(x=swapped, y=sin_signed))


def _transformer(x, w: dict, dims: DecoderDims, frames: int):
    """pre_transformer on x [T, latent] -> [T, latent]."""
    p = "pre_transformer."
    nh, d, t = dims.num_heads, dims.head_dim, frames
    cos, sin_signed = rope_tables(frames, d, dims.rope_theta)
    i = np.arange(t)[:, None]
    j = np.arange(t)[None, :]
    # transformers' sliding window: query i sees keys j with i - window < j <= i.
    mask = np.where((j <= i) & (j > i - dims.sliding_window), 0.0, MASK_NEG).astype(np.float32)
    x = linear(x, w[p + "input_proj.weight"], w[p + "input_proj.bias"])
    for n in range(dims.num_layers):
        lp = f"{p}layers.{n}."
        h = rms_norm(x, w[lp + "input_layernorm.weight"], dims.rms_norm_eps, name=f"dec_l{n}_in_norm")

        def heads(name):
            y = mb.reshape(x=linear(h, w[lp + f"self_attn.{name}.weight"]), shape=[t, nh, d])
            return mb.transpose(x=y, perm=[1, 0, 2])               # [nh, T, d]

        q = _rope_seq(heads("q_proj"), cos, sin_signed, d)
        k = _rope_seq(heads("k_proj"), cos, sin_signed, d)
        v = heads("v_proj")
        scores = mb.add(x=mb.mul(x=mb.matmul(x=q, y=k, transpose_y=True), y=np.float32(d ** -0.5)), y=mask)
        attn = mb.matmul(x=mb.softmax(x=scores, axis=-1), y=v)      # [nh, T, d]
        attn = mb.reshape(x=mb.transpose(x=attn, perm=[1, 0, 2]), shape=[t, nh * d])
        attn = linear(attn, w[lp + "self_attn.o_proj.weight"])
        x = mb.add(x=x, y=mb.mul(x=attn, y=f32(w[lp + "self_attn_layer_scale.scale"])))
        h = rms_norm(x, w[lp + "post_attention_layernorm.weight"], dims.rms_norm_eps, name=f"dec_l{n}_post_norm")
        mlp = linear(mb.mul(x=mb.silu(x=linear(h, w[lp + "mlp.gate_proj.weight"])),
                            y=linear(h, w[lp + "mlp.up_proj.weight"])), w[lp + "mlp.down_proj.weight"])
        x = mb.add(x=x, y=mb.mul(x=mlp, y=f32(w[lp + "mlp_layer_scale.scale"])))
    x = rms_norm(x, w[p + "norm.weight"], dims.rms_norm_eps, name="dec_final_norm")
    return linear(x, w[p + "output_proj.weight"], w[p + "output_proj.bias"])


def _convnext(x, w: dict, prefix: str):
    """x: [1, C, T]."""
    c = x.shape[1]
    y = causal_conv(x, w, prefix + ".dwconv.conv", groups=c)
    y = mb.transpose(x=y, perm=[0, 2, 1])
    y = mb.layer_norm(x=y, axes=[-1], gamma=f32(w[prefix + ".norm.weight"]),
                      beta=f32(w[prefix + ".norm.bias"]), epsilon=1e-6)
    y = mb.gelu(x=linear(y, w[prefix + ".pwconv1.weight"], w[prefix + ".pwconv1.bias"]), mode="EXACT")
    y = mb.mul(x=linear(y, w[prefix + ".pwconv2.weight"], w[prefix + ".pwconv2.bias"]),
               y=f32(w[prefix + ".gamma"]))
    return mb.add(x=x, y=mb.transpose(x=y, perm=[0, 2, 1]))


def build_decoder_program(w: dict, dims: DecoderDims, frames: int, opset=None):
    """``w``: the decoder tensors without the ``decoder.`` prefix. Input ``codes`` int32
    [1, num_quantizers, frames]; output ``audio`` fp32 [1, frames * samples_per_frame]."""
    import coremltools as ct

    q, bins = dims.num_quantizers, dims.codebook_size
    tables = [codebook(w, "quantizer.rvq_first.vq.layers.0.")]
    tables += [codebook(w, f"quantizer.rvq_rest.vq.layers.{i}.") for i in range(q - 1)]
    table = np.concatenate(tables, axis=0)                          # [q*bins, dim]
    offsets = (np.arange(q, dtype=np.int32) * bins)[:, None]
    proj_first = w["quantizer.rvq_first.output_proj.weight"][:, :, 0]
    proj_rest = w["quantizer.rvq_rest.output_proj.weight"][:, :, 0]

    @mb.program(input_specs=[mb.TensorSpec((1, q, frames), dtype=types.int32)],
                opset_version=opset or ct.target.iOS18)
    def prog(codes):
        # Codes outside [0, bins) would index another codebook; the reference clamps at 0.
        c = mb.reshape(x=codes, shape=[q, frames])
        c = mb.maximum(x=mb.minimum(x=c, y=np.int32(bins - 1)), y=np.int32(0))
        emb = mb.gather(x=f32(table), indices=mb.add(x=c, y=offsets), axis=0)   # [q, T, dim]
        first = mb.reshape(x=mb.slice_by_index(x=emb, begin=[0, 0, 0], end=[1, frames, table.shape[1]]),
                           shape=[frames, table.shape[1]])
        rest = mb.reduce_sum(x=mb.slice_by_index(x=emb, begin=[1, 0, 0], end=[q, frames, table.shape[1]]),
                             axes=[0], keep_dims=False)
        z = mb.add(x=linear(first, proj_first), y=linear(rest, proj_rest))       # [T, codebook_dim]
        x = mb.expand_dims(x=mb.transpose(x=z, perm=[1, 0]), axes=[0])          # [1, C, T]
        x = causal_conv(x, w, "pre_conv.conv")
        x = mb.reshape(x=mb.transpose(x=x, perm=[0, 2, 1]), shape=[frames, dims.latent_dim])
        x = _transformer(x, w, dims, frames)
        x = mb.expand_dims(x=mb.transpose(x=x, perm=[1, 0]), axes=[0])          # [1, latent, T]
        for i, factor in enumerate(dims.upsampling_ratios):
            x = causal_trans_conv(x, w, f"upsample.{i}.0.conv", factor)
            x = _convnext(x, w, f"upsample.{i}.1")
        x = causal_conv(x, w, "decoder.0.conv")
        for b, rate in enumerate(dims.upsample_rates, start=1):
            bp = f"decoder.{b}.block."
            x = snake_beta(x, w, bp + "0")
            x = causal_trans_conv(x, w, bp + "1.conv", rate)
            for u, dil in zip((2, 3, 4), (1, 3, 9)):
                y = snake_beta(x, w, f"{bp}{u}.act1")
                y = causal_conv(y, w, f"{bp}{u}.conv1.conv", dilation=dil)
                y = snake_beta(y, w, f"{bp}{u}.act2")
                y = causal_conv(y, w, f"{bp}{u}.conv2.conv")
                x = mb.add(x=x, y=y)
        n = len(dims.upsample_rates) + 1
        x = snake_beta(x, w, f"decoder.{n}")
        x = causal_conv(x, w, f"decoder.{n + 1}.conv")
        x = mb.clip(x=x, alpha=np.float32(-1.0), beta=np.float32(1.0))
        return mb.reshape(x=x, shape=[1, frames * dims.samples_per_frame], name="audio")

    return prog
