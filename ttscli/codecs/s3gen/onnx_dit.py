"""CosyVoice3's DiT velocity estimator (``flow.decoder.estimator`` of flow.pt) on onnxruntime.

As :mod:`onnx_flow` does for Chatterbox's U-Net, only the network called once per Euler step
moves; the Euler loop, CFG's mixing and the noise stay in
:class:`~ttscli.codecs.s3gen.flow.CausalConditionalCFM`. The graph is built with the ``onnx``
package from the weights the MLX DiT holds (names as below ``decoder.estimator.`` in flow.pt),
float32, dynamic batch and time axes, channels-last ``[B, T, C]`` as dit.py.

Why: on a 2-core AVX2 CPU MLX with MKL runs these GEMMs on MKL's generic path, and the
DiT took twice as long as upstream's PyTorch DiT; onnxruntime's own GEMMs, its fused
attention and LayerNorm run one estimator call of CFG's 2 rows several times faster than MLX
(docs/benchmarks.md#cv3-cpu-dit-onnx).

Graph inputs beside the estimator's five: ``attn_bias [1, 1, T, T]``, added to every head's
attention scores: zeros one-shot, minus a large number outside the chunk-causal pattern when
streaming (dit.chunk_mask), so one graph serves both.
Per block: the adaptive LayerNorm-zero's six modulation rows come from one GEMM of SiLU(t);
q, k and v one fused GEMM; the partial rotary (the first ``dim_head`` channels of q and k,
interleaved pairs) as ``head * cos + (head @ R) * sin`` with ``R`` the fixed pair rotation;
onnxruntime's ``MultiHeadAttention`` with the bias; the tanh-GELU FFN.

At int8 (opt-in: ``--backend flow_estimator=onnx-int8``) the blocks' q/k/v, output and FFN
linears, nearly all the arithmetic, are ``DynamicQuantizeMatMul`` (int8 weights per output
channel, activations quantized at run time); the time, input and output layers stay
block-quantized ``MatMulNBits`` as at int4.
"""
from __future__ import annotations

import math

import numpy as np

from ttscli.backends.onnx.component import GraphComponent
from ttscli.backends.onnx.graph import MS, Builder, Prefixed, Quant, dynamic_int8_tag, finish

from .dit import DiTFlowArgs

PREFIX = "decoder.estimator."
INPUTS = ("x", "mu", "t", "spks", "cond", "attn_bias")
OUTPUT = "velocity"
GRAPH_LAYOUT = 1
# softmax weight of a masked position: exp(-1e9 - max) is 0 in float32
MASKED = -1e9


class _Net:
    def __init__(self, b: Builder, source, a: DiTFlowArgs):
        self.b, self.w, self.a = b, Prefixed(source, PREFIX), a

    def p(self, key: str) -> np.ndarray:
        return self.w[key]

    def op(self, name: str, *inputs: str, **attrs) -> str:
        return self.b.node(name, list(inputs), **attrs)[0]

    def i64(self, values, base: str = "shape") -> str:
        return self.b.const(self.b.name(base), np.array(values, np.int64))

    def linear(self, x: str, key: str) -> str:
        return self.b.linear(x, self.p(key + ".weight"), self.p(key + ".bias"), key)

    def flinear(self, x: str, key: str) -> str:
        return self.frame_linear(x, self.p(key + ".weight"), self.p(key + ".bias"), key)

    def frame_linear(self, x: str, w: np.ndarray, bias: np.ndarray, key: str) -> str:
        """A linear layer applied to every frame (the blocks' attention and FFN): at int8 an
        integer GEMM with the activations quantized at run time
        (:func:`~ttscli.backends.onnx.graph.dynamic_int8_linear`), which on a CPU with VNNI runs
        these wide products several times faster than the block-quantized int8 kernel the other
        linears keep."""
        return self.b.linear(x, w, bias, key, dynamic=True)

    def silu(self, x: str) -> str:
        return self.op("Mul", x, self.op("Sigmoid", x))

    def mish(self, x: str) -> str:
        return self.op("Mul", x, self.op("Tanh", self.op("Softplus", x)))

    def norm(self, x: str) -> str:
        """LayerNorm without affine parameters, eps 1e-6."""
        return self.op("LayerNormalization", x, "ones_dim", "zeros_dim", axis=-1, epsilon=1e-6)

    def modulate(self, x: str, scale: str, shift: str) -> str:
        """``norm(x) * (1 + scale) + shift`` with ``scale``/``shift`` ``[B, 1, dim]``."""
        return self.op("Add", self.op("Mul", self.norm(x), self.op("Add", scale, "one")), shift)

    def grouped_conv(self, x: str, key: str) -> str:
        """Left-padded grouped conv of ``[B, T, C]`` (weight ``[C, C / g, k]``), as Conv on ``[B, C, T]``."""
        w = self.p(key + ".weight")
        c, per, k = w.shape
        xt = self.op("Transpose", x, perm=[0, 2, 1])
        xp = self.op("Pad", xt, self.i64([0, 0, k - 1, 0, 0, 0], "pads"))
        y = self.op("Conv", xp, self.b.const(key + ".weight", w), self.b.const(key + ".bias", self.p(key + ".bias")),
                    group=c // per, kernel_shape=[k])
        return self.op("Transpose", y, perm=[0, 2, 1])

    def rotate(self, y: str, cos: str, sin: str) -> str:
        """The first ``dim_head`` channels of ``y [B, T, inner]`` rotated in interleaved pairs."""
        d, inner = self.a.dim_head, self.a.heads * self.a.dim_head
        head = self.op("Slice", y, self.i64([0], "start"), self.i64([d], "end"), "axis_last")
        rest = self.op("Slice", y, self.i64([d], "start"), self.i64([inner], "end"), "axis_last")
        turned = self.op("MatMul", head, "pair_rotation")
        rotated = self.op("Add", self.op("Mul", head, cos), self.op("Mul", turned, sin))
        return self.op("Concat", rotated, rest, axis=-1)

    def block(self, x: str, temb_act: str, cos: str, sin: str, bias: str, i: int) -> str:
        a, b = self.a, self.b
        key = f"transformer_blocks.{i}."
        mod = self.op("Unsqueeze", self.linear(temb_act, key + "attn_norm.linear"), "axis1")   # [B, 1, 6 dim]
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = b.node(
            "Split", [mod, self.i64([a.dim] * 6, "split")], 6, axis=-1)
        h = self.modulate(x, scale_msa, shift_msa)
        at = key + "attn."
        inner = a.heads * a.dim_head
        wqkv = np.concatenate([self.p(at + n + ".weight") for n in ("to_q", "to_k", "to_v")])
        bqkv = np.concatenate([self.p(at + n + ".bias") for n in ("to_q", "to_k", "to_v")])
        q, k, v = b.node("Split", [self.frame_linear(h, wqkv, bqkv, at + "qkv"), self.i64([inner] * 3, "split")], 3,
                         axis=-1)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        y = b.node("MultiHeadAttention", [q, k, v, "", "", bias], domain=MS, num_heads=a.heads,
                   scale=float(a.dim_head ** -0.5))[0]
        x = self.op("Add", x, self.op("Mul", gate_msa, self.flinear(y, at + "to_out.0")))
        h = self.modulate(x, scale_mlp, shift_mlp)
        ff = key + "ff.ff."
        h = self.flinear(self.b.node("FastGelu", [self.flinear(h, ff + "0.0")], domain=MS)[0], ff + "2")
        return self.op("Add", x, self.op("Mul", gate_mlp, h))

    def build(self) -> None:
        a, b = self.a, self.b
        b.const("axis1", np.array([1], np.int64))
        b.const("axis_last", np.array([-1], np.int64))
        b.const("one", np.array(1.0, np.float32))
        b.const("ones_dim", np.ones(a.dim, np.float32))
        b.const("zeros_dim", np.zeros(a.dim, np.float32))
        # (x @ R)[2i] = -x[2i + 1], (x @ R)[2i + 1] = x[2i]
        rot = np.zeros((a.dim_head, a.dim_head), np.float32)
        rot[1::2, 0::2] = -np.eye(a.dim_head // 2, dtype=np.float32)
        rot[0::2, 1::2] = np.eye(a.dim_head // 2, dtype=np.float32)
        b.const("pair_rotation", rot)
        # the flow time's sinusoidal features (sin ‖ cos, scale 1000), then the time MLP
        half = self.p("time_embed.time_mlp.0.weight").shape[1] // 2
        freqs = np.exp(np.arange(half, dtype=np.float32) * np.float32(-(math.log(10000) / (half - 1))))
        ang = self.op("Mul", self.op("Unsqueeze", "t", "axis1"), b.const("time_freqs", 1000.0 * freqs[None]))
        feats = self.op("Concat", self.op("Sin", ang), self.op("Cos", ang), axis=-1)
        temb = self.linear(self.silu(self.linear(feats, "time_embed.time_mlp.0")), "time_embed.time_mlp.2")
        temb_act = self.silu(temb)                 # every AdaLayerNormZero starts with SiLU
        # input embedding: [x, cond, mu, spk] -> proj, plus its causal conv position embedding
        spk = self.op("Expand", self.op("Unsqueeze", "spks", "axis1"),
                      self.op("Concat", self.op("Slice", self.op("Shape", "x"), self.i64([0], "start"),
                                                self.i64([2], "end")), self.i64([a.output_size], "width"), axis=0))
        h = self.linear(self.op("Concat", "x", "cond", "mu", spk, axis=-1), "input_embed.proj")
        pos = self.mish(self.grouped_conv(h, "input_embed.conv_pos_embed.conv1.0"))
        pos = self.mish(self.grouped_conv(pos, "input_embed.conv_pos_embed.conv2.0"))
        h = self.op("Add", pos, h)
        # rotary tables [T, dim_head] of the positions 0 .. T - 1, each frequency twice in a row
        frames = self.op("Cast", self.op("Slice", self.op("Shape", "x"), self.i64([1], "start"),
                                         self.i64([2], "end")), to=1)
        positions = self.op("Range", self.op("Squeeze", self.b.const("zero_f", np.zeros(1, np.float32))),
                            self.op("Squeeze", frames), self.op("Squeeze", b.const("one_f", np.ones(1, np.float32))))
        inv = np.repeat(self.p("rotary_embed.inv_freq"), 2)[None, :]
        rope = self.op("Mul", self.op("Unsqueeze", positions, "axis1"), b.const("inv_freq_pairs", inv))
        cos, sin = self.op("Cos", rope), self.op("Sin", rope)
        for i in range(a.depth):
            h = self.block(h, temb_act, cos, sin, "attn_bias", i)
        scale, shift = b.node("Split", [self.op("Unsqueeze", self.linear(temb_act, "norm_out.linear"), "axis1"),
                                        self.i64([a.dim] * 2, "split")], 2, axis=-1)
        b.linear(self.modulate(h, scale, shift), self.p("proj_out.weight"), self.p("proj_out.bias"), "proj_out",
                 out=OUTPUT)


def build_graph(source, a: DiTFlowArgs, data=None, data_name: str = "", quant: Quant | None = None):
    """The ONNX model of the DiT from a weight source (``get``/``in``/``path``, float32 numpy,
    names as in flow.pt); ``quant``: the linear layers' weights (float32 unless int8 / int4)."""
    from onnx import TensorProto, helper

    b = Builder(quant or Quant("float32"), data, data_name)
    _Net(b, source, a).build()
    mel, f = a.output_size, TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f, ["batch", "time", mel]),
              helper.make_tensor_value_info("mu", f, ["batch", "time", mel]),
              helper.make_tensor_value_info("t", f, ["batch"]),
              helper.make_tensor_value_info("spks", f, ["batch", mel]),
              helper.make_tensor_value_info("cond", f, ["batch", "time", mel]),
              helper.make_tensor_value_info("attn_bias", f, [1, 1, "time", "time"])]
    outputs = [helper.make_tensor_value_info(OUTPUT, f, ["batch", "time", mel])]
    return finish(b, "cosyvoice3_dit", inputs, outputs)


def attn_bias(frames: int, a: DiTFlowArgs, streaming: bool) -> np.ndarray:
    """``[1, 1, T, T]``: zeros, or :data:`MASKED` where dit.chunk_mask hides a frame."""
    if not streaming:
        return np.zeros((1, 1, frames, frames), np.float32)
    i = np.arange(frames)
    visible = i[None, :] < ((i // a.static_chunk_size + 1) * a.static_chunk_size)[:, None]
    return np.where(visible, 0.0, MASKED).astype(np.float32)[None, None]


def layout(a: DiTFlowArgs, precision: str = "float32") -> str:
    # the head split and the chunk size are in no tensor's shape: they belong to the graph's
    # identity; so does the int8 kernel of the blocks' linears (graphs cached with block-quantized
    # ones are rebuilt)
    base = f"cosyvoice3/flow_estimator/{GRAPH_LAYOUT}/{a.heads}x{a.dim_head}/{a.static_chunk_size}"
    return base + (f"/{dynamic_int8_tag()}" if precision == "int8" else "")


COMPONENT = GraphComponent(family="cosyvoice3", name="flow_estimator", file="flow_estimator.onnx",
                           variant="onnx-dit-float32", source_files=("flow.pt",), prefix=PREFIX, output=OUTPUT,
                           what="CosyVoice3's DiT flow estimator")


class OnnxDiT:
    """The DiT graph in a session, called as the MLX DiT is (MLX arrays in and out, ``streaming``)."""

    def __init__(self, folder, a: DiTFlowArgs):
        self.session, self.a = COMPONENT.session(folder), a

    def __call__(self, x, mu, t, spks, cond, streaming: bool = False):
        import mlx.core as mx

        feeds = {n: np.asarray(v, np.float32) for n, v in zip(INPUTS, (x, mu, t, spks, cond), strict=False)}
        feeds["attn_bias"] = attn_bias(feeds["x"].shape[1], self.a, streaming)
        return mx.array(self.session.run([OUTPUT], feeds)[0])


def attach(flow, checkpoint=None, model_id: str | None = None, precision: str = "float32") -> None:
    """Run ``flow``'s DiT (a :class:`~ttscli.codecs.s3gen.dit.CausalMaskedDiffWithDiT`) on
    onnxruntime from now on: the graph of ``checkpoint``'s flow.pt found (or built once) in
    ttscli's cache by the file's hash, or, with ``checkpoint`` None, of the in-memory weights;
    ``precision``: its linear weights, float32 (the goldens' arithmetic) or int8 / int4."""
    a = flow.a
    COMPONENT.check_float32(flow.decoder.estimator, "--backend flow_estimator=mlx")
    folder = COMPONENT.find_or_build(flow.decoder.estimator, checkpoint, model_id, layout(a, precision),
                                     lambda src, data, name, quant: build_graph(src, a, data, name, quant),
                                     {"flow": a}, quant=Quant(precision))
    flow.decoder.external_estimator = OnnxDiT(folder, a)
