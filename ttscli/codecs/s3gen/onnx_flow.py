"""S3Gen's flow estimator (``flow.decoder.estimator``, the CFM's U-Net) on onnxruntime.

Only the network called once per Euler step moves: the Euler loop, CFG's mixing, the noise and
the cosine schedule stay in :class:`~ttscli.codecs.s3gen.flow.CausalConditionalCFM`,
which calls :class:`OnnxEstimator` in place of its MLX estimator when one is attached. The
graph is built with the ``onnx`` package from the same weights the MLX estimator holds (names
as in the checkpoint below ``flow.decoder.estimator.``), float32, dynamic batch and time axes.

Why: on the project's 2-core AVX2 CPU one estimator call at the real size (CFG's 2 rows x 300
frames) runs several times faster under onnxruntime than on MLX with MKL
(docs/benchmarks.md#cb-cpu-flow-onnx). Layout is channels-last ``[B, T, C]``
as in flow.py: a causal k3 conv is one GEMM over the three shifted copies of its left-padded
input (im2col), so no transformer block needs a transpose; ``Conv`` on ``[B, C, T]`` with
transposes around it was no faster and the 2-D form ``[B, C, 1, T]`` (the blocked NCHWc
kernels) slower (same entry). Attention is onnxruntime's fused ``MultiHeadAttention``,
LayerNorm its fused kernel, GELU its erf ``Gelu``.

Where the graphs live: built from a checkpoint, in ttscli's cache
(``paths.converted_dir(MODEL, "onnx-flow-float32")``), found by the sha256 of
s3gen.safetensors and rebuilt when stale; built from an in-memory model (``--random-weights``),
under a fingerprint of its weights (ttscli.backends.onnx.convert).

Which runs: ``--backend flow_estimator=mlx|onnx``; by default onnx on a Linux CPU where
onnxruntime is installed (measured faster there, above), MLX elsewhere (macOS, a GPU): the
chatterbox family declares it (its family.py), ttscli.backends.select resolves it.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ttscli.backends.onnx.component import FLOAT32, GraphComponent
from ttscli.backends.onnx.graph import MS, Builder, Prefixed, finish

from .flow import FlowArgs

FAMILY = "chatterbox"          # the manifest's family: built from Chatterbox's s3gen.safetensors (a cached graph's key)
GRAPH_LAYOUT = 1
PREFIX = "flow.decoder.estimator."
INPUTS = ("x", "mu", "t", "spks", "cond")
OUTPUT = "velocity"
COMPONENT = GraphComponent(family=FAMILY, name="flow_estimator", file="flow_estimator.onnx",
                           variant="onnx-flow-float32", source_files=("s3gen.safetensors",), prefix=PREFIX,
                           output=OUTPUT, what="S3Gen's flow estimator")
FILE, VARIANT = COMPONENT.file, COMPONENT.variant


class _Net:
    """Emits the estimator's nodes into a :class:`Builder` from weights named as flow.py's modules."""

    def __init__(self, b: Builder, source, a: FlowArgs):
        self.b, self.w, self.a = b, Prefixed(source, PREFIX), a

    def p(self, key: str) -> np.ndarray:
        return self.w[key]

    def linear(self, x: str, key: str, bias: bool = True) -> str:
        return self.b.linear(x, self.p(key + ".weight"), self.p(key + ".bias") if bias else None, key)

    def layer_norm(self, x: str, key: str, eps: float = 1e-5) -> str:
        g = self.b.const(key + ".weight", self.p(key + ".weight"))
        beta = self.b.const(key + ".bias", self.p(key + ".bias"))
        return self.b.node("LayerNormalization", [x, g, beta], axis=-1, epsilon=eps)[0]

    def mish(self, x: str) -> str:
        sp = self.b.node("Softplus", [x])[0]
        return self.b.node("Mul", [x, self.b.node("Tanh", [sp])[0]])[0]

    def conv(self, x: str, key: str) -> str:
        """A causal (left-padded) conv of ``[B, T, in]``, weight ``[out, in, k]``."""
        w = self.p(key + ".weight")
        out, cin, k = w.shape
        bias = self.p(key + ".bias")
        b = self.b
        if k == 1:
            return b.linear(x, w[:, :, 0], bias, key)
        xp = b.node("Pad", [x, b.const(b.name("pads"), np.array([0, k - 1, 0, 0, 0, 0], np.int64))])[0]
        taps = []
        for j in range(k):
            # tap j: frames j .. j + T - 1 of the padded input (an end of int64 max: to the end)
            end = j - (k - 1) if j < k - 1 else np.iinfo(np.int64).max
            taps.append(b.node("Slice", [xp, b.const(b.name("start"), np.array([j], np.int64)),
                                         b.const(b.name("end"), np.array([end], np.int64)), "axis1"])[0])
        cols = b.node("Concat", taps, axis=-1)[0]
        # im2col column (j, c) holds tap j of channel c: weight rows in the same order
        return b.linear(cols, w.transpose(0, 2, 1).reshape(out, k * cin), bias, key)

    def block1d(self, x: str, key: str) -> str:
        return self.mish(self.layer_norm(self.conv(x, key + ".block.0"), key + ".block.2"))

    def resnet(self, x: str, temb_act: str, key: str) -> str:
        h = self.block1d(x, key + ".block1")
        t = self.linear(temb_act, key + ".mlp.1")                     # [B, out]
        h = self.b.node("Add", [h, self.b.node("Unsqueeze", [t, "axis1"])[0]])[0]
        return self.b.node("Add", [self.conv(x, key + ".res_conv"), self.block1d(h, key + ".block2")])[0]

    def transformer(self, x: str, key: str) -> str:
        b, a = self.b, self.a
        h = self.layer_norm(x, key + ".norm1")
        at = key + ".attn1."
        wqkv = np.concatenate([self.p(at + n + ".weight") for n in ("to_q", "to_k", "to_v")])
        qkv = b.linear(h, wqkv, None, at + "qkv")
        inner = a.dec_heads * a.dec_head_dim
        q, k, v = b.node("Split", [qkv, b.const(at + "split", np.array([inner] * 3, np.int64))], 3, axis=-1)
        y = b.node("MultiHeadAttention", [q, k, v], domain=MS, num_heads=a.dec_heads,
                   scale=float(a.dec_head_dim ** -0.5))[0]
        x = b.node("Add", [x, self.linear(y, at + "to_out.0")])[0]
        h = self.layer_norm(x, key + ".norm3")
        ff = key + ".ff.net."
        h = b.node("Gelu", [self.linear(h, ff + "0.proj")], domain=MS)[0]
        return b.node("Add", [x, self.linear(h, ff + "2")])[0]

    def build(self) -> None:
        b, a = self.b, self.a
        b.const("axis1", np.array([1], np.int64))
        # Matcha's SinusoidalPosEmb of t (as wide as the time MLP's input), then the time MLP
        half = self.p("time_mlp.linear_1.weight").shape[1] // 2
        freqs = np.exp(np.arange(half, dtype=np.float32) * np.float32(-(math.log(10000) / (half - 1))))
        ang = b.node("Mul", [b.node("Unsqueeze", ["t", "axis1"])[0], b.const("time_freqs", 1000.0 * freqs[None])])[0]
        feats = b.node("Concat", [b.node("Sin", [ang])[0], b.node("Cos", [ang])[0]], axis=-1)[0]
        h = self.linear(feats, "time_mlp.linear_1")
        h = b.node("Mul", [h, b.node("Sigmoid", [h])[0]])[0]
        temb = self.mish(self.linear(h, "time_mlp.linear_2"))       # every resnet's mlp starts with Mish
        spk = b.node("Expand", [b.node("Unsqueeze", ["spks", "axis1"])[0], b.node("Shape", ["x"])[0]])[0]
        x = b.node("Concat", ["x", "mu", spk, "cond"], axis=-1)[0]
        x = self.resnet(x, temb, "down_blocks.0.0")
        for i in range(a.dec_n_blocks):
            x = self.transformer(x, f"down_blocks.0.1.{i}")
        skip = x
        x = self.conv(x, "down_blocks.0.2")
        for m in range(a.dec_mid_blocks):
            x = self.resnet(x, temb, f"mid_blocks.{m}.0")
            for i in range(a.dec_n_blocks):
                x = self.transformer(x, f"mid_blocks.{m}.1.{i}")
        x = self.resnet(b.node("Concat", [x, skip], axis=-1)[0], temb, "up_blocks.0.0")
        for i in range(a.dec_n_blocks):
            x = self.transformer(x, f"up_blocks.0.1.{i}")
        x = self.block1d(self.conv(x, "up_blocks.0.2"), "final_block")
        w = self.p("final_proj.weight")
        b.linear(x, w[:, :, 0], self.p("final_proj.bias"), "final_proj", out=OUTPUT)


def build_estimator(source, a: FlowArgs, *, data=None, data_name: str = ""):
    """The ONNX model of the estimator from a weight source (``get``/``in``, float32 numpy, names
    as in s3gen.safetensors); ``data``/``data_name``: an external-data file, as
    :func:`ttscli.backends.onnx.graph.build_graph`."""
    from onnx import TensorProto, helper

    b = Builder(FLOAT32, data, data_name)
    _Net(b, source, a).build()
    mel, f = a.output_size, TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f, ["batch", "time", mel]),
              helper.make_tensor_value_info("mu", f, ["batch", "time", mel]),
              helper.make_tensor_value_info("t", f, ["batch"]),
              helper.make_tensor_value_info("spks", f, ["batch", mel]),
              helper.make_tensor_value_info("cond", f, ["batch", "time", mel])]
    outputs = [helper.make_tensor_value_info(OUTPUT, f, ["batch", "time", mel])]
    return finish(b, "s3gen_flow_estimator", inputs, outputs)


# ----------------------------------------------------------------------------- export and cache


def _layout(a: FlowArgs) -> str:
    # the head split is not in any tensor's shape: it belongs to the graph's identity
    return f"{FAMILY}/{COMPONENT.name}/{GRAPH_LAYOUT}/{a.dec_heads}x{a.dec_head_dim}"


def _build(a: FlowArgs):
    return lambda source, data, data_name, quant: build_estimator(source, a, data=data, data_name=data_name)


def export_estimator(source, a: FlowArgs, out_dir: Path, *, model_id: str, source_record: dict) -> dict:
    """``flow_estimator.onnx`` (+ ``.data``) and the manifest into ``out_dir``."""
    return COMPONENT.export(source, out_dir, _build(a), model_id=model_id, source_record=source_record,
                            layout=_layout(a), info={"flow": a})


def find_or_build(flow, checkpoint: Path | None, model_id: str | None = None) -> Path:
    """The estimator graph of ``flow`` (loaded from ``checkpoint``'s s3gen.safetensors, a
    Chatterbox folder) in ttscli's cache, found by the file's hash and built once when missing
    or stale; with ``checkpoint`` None (random or in-memory weights), by their fingerprint."""
    return COMPONENT.find_or_build(flow.decoder.estimator, checkpoint, model_id, _layout(flow.a), _build(flow.a),
                                   {"flow": flow.a})


def build_from_model(flow) -> Path:
    """The graph of an in-memory flow's estimator (random weights at the real size for ``bench
    --random-weights``), cached by a fingerprint of its weights."""
    return find_or_build(flow, None)


# ----------------------------------------------------------------------------- runtime


class OnnxEstimator:
    """The estimator graph in a session: called as the MLX estimator is (MLX arrays in and out)."""

    def __init__(self, folder: Path):
        # attention scores are [2, 8, T, T]: the session has no arena (GraphComponent.session)
        self.session = COMPONENT.session(folder)

    def __call__(self, x, mu, t, spks, cond):
        import mlx.core as mx

        feeds = {n: np.asarray(v, np.float32) for n, v in zip(INPUTS, (x, mu, t, spks, cond), strict=True)}
        return mx.array(self.session.run([OUTPUT], feeds)[0])


def attach(flow, checkpoint: Path | None, model_id: str | None = None) -> None:
    """Run ``flow``'s estimator on onnxruntime from now on: the graph of ``checkpoint``'s
    s3gen.safetensors (a Chatterbox folder), or, with ``checkpoint`` None, of the in-memory
    weights. The graph computes in float32: an estimator held in another dtype is refused."""
    COMPONENT.check_float32(flow.decoder.estimator, "--backend flow_estimator=mlx")
    folder = find_or_build(flow, None if checkpoint is None else Path(checkpoint), model_id)
    flow.decoder.external_estimator = OnnxEstimator(folder)
