"""IndexTTS2's S2Mel velocity network (``cfm.estimator`` of ``s2mel.pth``) on onnxruntime.

Only the network the Euler solver calls at every step moves: :meth:`DiT.velocity` of
:mod:`ttscli.models.indextts2.dit`. The solver, CFG's mixing, the noise and the per-synthesis
condition (:meth:`DiT.condition`) stay on MLX in :class:`~ttscli.models.indextts2.s2mel.CFM`,
which calls :class:`OnnxVelocity` in place of the MLX method once :func:`attach` has run. The
graph is built with the ``onnx`` package from the weights the MLX DiT holds (names as below
``cfm.estimator.`` in ``s2mel.pth``), dynamic batch and time axes, channels-last ``[B, T, C]``.

Why: the 25 Euler steps over CFG's two rows are most of a synthesis, and on a Linux CPU MLX's
float32 GEMMs run at half to two thirds of the speed of onnxruntime's (MLAS); with onnxruntime's
GEMMs, its fused attention and norms a step takes about half the time in float32. int8 is
opt-in (the weights are then not the checkpoint's): the blocks' and the WaveNet's linears,
nearly all the arithmetic, become ``DynamicQuantizeMatMul``
(:func:`~ttscli.backends.onnx.graph.dynamic_int8_linear`), whose integer GEMM on a CPU with
VNNI is about three times the float32 one's speed, where ``MatMulNBits`` int8 is
barely faster than float32 at these shapes. int4 quantizes the same layers with
``MatMulNBits`` (smaller, not faster). The layers of the time alone (one row per call), the
narrow input and output projections and the long skip (whose input joins the noisy mel to the
hidden states, two scales one per-tensor quantization would share) stay float32 at every
precision: they cost little, and quantized they would add markedly to the error.

Graph inputs: ``x [B, T, 80]``; ``t [1]``, the flow time every row shares; ``cond [B, T,
hidden]`` from :meth:`DiT.condition`; two int64 ``[1]`` frame indices: ``cut``, the first frame
the last block, the WaveNet and the output layers compute (``start - wavenet.reach``, at least
0), and ``offset``, the first returned frame counted from ``cut``. Output: ``velocity [B, T -
cut - offset, 80]``. As on MLX, everything that depends on the time alone (both time
embeddings, every adaptive norm's scale and shift with the norm's gain folded in, the final
layer's modulation, the WaveNet's condition with its convolutions' biases folded in) is
computed for one row and broadcast.

Per block: RMSNorm (``SimplifiedLayerNormalization``) times scale plus shift; the fused
``wqkv`` (the last block: queries of frames ``cut..`` only, keys and values of all frames);
onnxruntime's ``RotaryEmbedding`` on adjacent channel pairs from a table of float32 angles as
upstream's; its unmasked ``MultiHeadAttention``; ``wo``; SwiGLU with ``w1``/``w3`` one GEMM.
The WaveNet's dilated k-tap convolutions are one GEMM each over the k shifted copies of the
reflection-padded input stacked on the channel axis (im2col), so they quantize with the other
linears; in float32 this GEMM is as fast as onnxruntime's ``Conv`` (with its two transposes)
or faster over the few hundred frames the WaveNet sees. ``final_layer.linear`` and ``conv2``
(a linear and a 1x1 conv with nothing between) are one linear.

The graph is cached in ttscli's cache (``converted/<model>/onnx-s2mel-<precision>/``), found
again by the sha256 of ``s2mel.pth``; from random or in-memory weights, under a fingerprint
of the weights (``onnx-random/``).
"""
from __future__ import annotations

import numpy as np

from ttscli.backends.onnx.component import GraphComponent
from ttscli.backends.onnx.graph import MS, Builder, Prefixed, Quant, dynamic_int8_tag, finish
from ttscli.errors import UsageError

from .dit import MAX_POSITIONS, NORM_EPS, ROPE_BASE, rope_inv_freq

PREFIX = "cfm.estimator."
INPUTS = ("x", "t", "cond", "cut", "offset")
OUTPUT = "velocity"
# the graph's version: a change in how the graph computes (not in the weights) bumps it, so a
# cached graph of an older build is rebuilt
GRAPH_LAYOUT = 1
# an end index past any frame count (Slice clamps it)
END = np.iinfo(np.int64).max
# tensors of the estimator the graph never reads: training / discrete-content tables, the
# content projection (inside ``cond``), the position buffer (the rotary table replaces it)
UNUSED = ("x_embedder.", "cond_embedder.", "cond_projection.", "content_mask_embedder.", "input_pos")


def keep(name: str) -> bool:
    return not name.startswith(UNUSED)


def rope_tables(head_dim: int, positions: int = MAX_POSITIONS, base: float = ROPE_BASE) -> tuple[np.ndarray, ...]:
    """cos and sin ``[positions, head_dim / 2]`` of the float32 angles ``position * inv_freq``
    (as upstream's ``precompute_freqs_cis`` rounds them), each evaluated in float64."""
    ang = np.arange(positions, dtype=np.float32)[:, None] * rope_inv_freq(head_dim, base)[None, :]
    ang = ang.astype(np.float64)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


class _Net:
    def __init__(self, b: Builder, source, args):
        self.b, self.w = b, Prefixed(source, PREFIX)
        d, wn = args.DiT, args.wavenet
        self.d, self.wn = d, wn
        self.dim, self.heads = d.hidden_dim, d.num_heads
        self.head_dim = d.hidden_dim // d.num_heads

    def p(self, key: str) -> np.ndarray:
        return self.w[key]

    def op(self, name: str, *inputs: str, **attrs) -> str:
        return self.b.node(name, list(inputs), **attrs)[0]

    def i64(self, values, base: str = "idx") -> str:
        return self.b.const(self.b.name(base), np.array(values, np.int64))

    def flin(self, x: str, w: np.ndarray, bias: np.ndarray | None, name: str, out: str | None = None) -> str:
        """A linear layer kept in float32 at every precision."""
        y = self.b.node("MatMul", [x, self.b.const(name + ".weight_t", np.ascontiguousarray(w.T))],
                        [out] if out and bias is None else 1)[0]
        if bias is None:
            return y
        return self.b.node("Add", [y, self.b.const(name + ".bias", bias)], [out] if out else 1)[0]

    def linear(self, x: str, key: str, bias: bool = True, quantized: bool = False) -> str:
        return (self.b.linear if quantized else self.flin)(x, self.p(key + ".weight"),
                                                      self.p(key + ".bias") if bias else None, key)

    def split(self, x: str, sizes: list[int]) -> list[str]:
        return self.b.node("Split", [x, self.i64(sizes, "split")], len(sizes), axis=-1)

    def frames_from(self, x: str, start: str) -> str:
        """``x[:, start:]`` for an int64 ``[1]`` tensor ``start``."""
        return self.op("Slice", x, start, "end", "axis1")

    def silu(self, x: str) -> str:
        return self.op("Mul", x, self.op("Sigmoid", x))

    def timestep(self, key: str) -> str:
        """``[1, dim]``: ``cos ‖ sin`` of ``1000 t freqs``, then Linear, SiLU, Linear."""
        t = self.op("Unsqueeze", self.op("Mul", "t", "thousand"), "axis1")              # [1, 1]
        ang = self.op("Mul", t, self.b.const(key + ".freqs", self.p(key + ".freqs")[None]))
        emb = self.op("Concat", self.op("Cos", ang), self.op("Sin", ang), axis=-1)
        return self.linear(self.silu(self.linear(emb, key + ".mlp.0")), key + ".mlp.2")

    def norm_keys(self) -> list[str]:
        keys = [f"transformer.layers.{i}.{n}" for i in range(self.d.depth) for n in ("attention_norm", "ffn_norm")]
        return keys + ["transformer.norm"]

    def modulations(self, t1: str) -> dict[str, tuple[str, str]]:
        """Every adaptive norm's (scale, shift), each ``[1, dim]``, from one GEMM of the time
        embedding; the RMSNorm's gain is folded into the scale's rows."""
        dim, keys = self.dim, self.norm_keys()
        ws, bs = [], []
        for k in keys:
            w, bias = self.p(k + ".project_layer.weight"), self.p(k + ".project_layer.bias")
            g = self.p(k + ".norm.weight")
            ws += [w[:dim] * g[:, None], w[dim:]]
            bs += [bias[:dim] * g, bias[dim:]]
        y = self.flin(t1, np.concatenate(ws), np.concatenate(bs), "adaptive_norms")
        parts = self.split(y, [dim] * (2 * len(keys)))
        return {k: (parts[2 * i], parts[2 * i + 1]) for i, k in enumerate(keys)}

    def adaptive_norm(self, x: str, mod: tuple[str, str]) -> str:
        h = self.op("SimplifiedLayerNormalization", x, "ones_dim", axis=-1, epsilon=NORM_EPS)
        return self.op("Add", self.op("Mul", h, mod[0]), mod[1])

    def rotate(self, y: str, position: str) -> str:
        """Rotary positions on adjacent pairs of every head of ``y [B, L, heads * head_dim]``,
        the first frame at ``position`` (int64 ``[1]``)."""
        return self.b.node("RotaryEmbedding", [y, position, "rope_cos", "rope_sin"], domain=MS,
                           interleaved=1, num_heads=self.heads)[0]

    def block(self, x: str, mods: dict, i: int, skip: str | None, queries_from: str | None) -> str:
        """One transformer block; ``queries_from``: the last block's first output frame, else None."""
        b, dim = self.b, self.dim
        key = f"transformer.layers.{i}."
        if skip is not None:
            x = self.linear(self.op("Concat", x, skip, axis=-1), key + "skip_in_linear", quantized=True)
        h = self.adaptive_norm(x, mods[key + "attention_norm"])
        wqkv = self.p(key + "attention.wqkv.weight")
        if queries_from is None:
            q, k, v = self.split(self.b.linear(h, wqkv, None, key + "attention.wqkv"), [dim] * 3)
            q_pos = "zero_i64"
        else:
            q = self.b.linear(self.frames_from(h, queries_from), wqkv[:dim], None, key + "attention.wq")
            k, v = self.split(self.b.linear(h, wqkv[dim:], None, key + "attention.wkv"), [dim] * 2)
            x = self.frames_from(x, queries_from)
            q_pos = queries_from
        q, k = self.rotate(q, q_pos), self.rotate(k, "zero_i64")
        y = b.node("MultiHeadAttention", [q, k, v], domain=MS, num_heads=self.heads,
                   scale=float(self.head_dim ** -0.5))[0]
        x = self.op("Add", x, self.linear(y, key + "attention.wo", bias=False, quantized=True))
        h = self.adaptive_norm(x, mods[key + "ffn_norm"])
        ff = key + "feed_forward."
        w13 = np.concatenate([self.p(ff + "w1.weight"), self.p(ff + "w3.weight")])
        gate, up = self.split(self.b.linear(h, w13, None, ff + "w13"), [w13.shape[0] // 2] * 2)
        return self.op("Add", x, self.linear(self.op("Mul", self.silu(gate), up), ff + "w2", bias=False,
                                             quantized=True))

    def transformer(self, x: str, t1: str) -> str:
        n = self.d.depth
        mods = self.modulations(t1)
        uvit = self.d.uvit_skip_connection
        skips = []
        for i in range(n):
            # blocks before the middle one push their output, blocks after it pop the latest
            skip = skips.pop() if uvit and i > n // 2 and skips else None
            x = self.block(x, mods, i, skip, "cut" if i == n - 1 else None)
            if uvit and i < n // 2:
                skips.append(x)
        return self.adaptive_norm(x, mods["transformer.norm"])

    def conv(self, x: str, key: str, bias: np.ndarray | None, dilation: int = 1) -> str:
        """A stride-1 conv of ``[B, T, in]`` (weight ``[out, in, k]``), reflection-padded as
        EnCodec's ``SConv1d`` (the odd frame left), as one GEMM over the k stacked taps."""
        w = self.p(key + ".weight")
        out, cin, k = w.shape
        if k == 1:
            return self.b.linear(x, w[:, :, 0], bias, key)
        span = (k - 1) * dilation
        right = span // 2
        padded = self.op("Pad", x, self.i64([0, span - right, 0, 0, right, 0], "pads"), mode="reflect")
        taps = [self.op("Slice", padded, self.i64([j * dilation], "start"),
                        self.i64([j * dilation - span if j * dilation < span else END], "stop"), "axis1")
                for j in range(k)]
        cols = self.op("Concat", *taps, axis=-1)                       # [B, T, k * in], tap-major
        return self.b.linear(cols, w.transpose(0, 2, 1).reshape(out, k * cin), bias, key)

    def wavenet(self, x: str, t: str) -> str:
        """``WN`` on ``x [B, T', hidden]`` conditioned on the second time embedding ``t [1, gin]``."""
        wn, n = "wavenet.", self.wn.num_layers
        h = self.wn.hidden_dim
        cw = self.p(wn + "cond_layer.conv.conv.weight")[:, :, 0]
        # each layer's conv_in bias joins its slice of the condition (both are per channel)
        cb = self.p(wn + "cond_layer.conv.conv.bias") + np.concatenate(
            [self.p(f"{wn}in_layers.{i}.conv.conv.bias") for i in range(n)])
        conds = self.split(self.flin(t, cw, cb, wn + "cond_layer"), [2 * h] * n)
        out = None
        for i in range(n):
            a = self.op("Add", self.conv(x, f"{wn}in_layers.{i}.conv.conv", None, self.wn.dilation_rate ** i), conds[i])
            th, sg = self.split(a, [h, h])
            acts = self.op("Mul", self.op("Tanh", th), self.op("Sigmoid", sg))
            key = f"{wn}res_skip_layers.{i}.conv.conv"
            rs = self.conv(acts, key, self.p(key + ".bias"))
            if i < n - 1:
                res, skip = self.split(rs, [h, h])
                x = self.op("Add", x, res)
            else:
                skip = rs
            out = skip if out is None else self.op("Add", out, skip)
        return out

    def final_layer(self, y: str, t1: str) -> str:
        """Time-modulated LayerNorm (no affine, eps 1e-6), then ``final_layer.linear`` and
        ``conv2`` as one linear."""
        h = self.wn.hidden_dim
        w, bias = self.p("final_layer.adaLN_modulation.1.weight"), self.p("final_layer.adaLN_modulation.1.bias")
        bias = bias.copy()
        bias[h:] += 1.0                                     # (1 + scale) in the bias
        shift, scale1 = self.split(self.flin(self.silu(t1), w, bias, "final_layer.adaLN_modulation.1"), [h, h])
        n = self.op("LayerNormalization", y, "ones_wn", "zeros_wn", axis=-1, epsilon=1e-6)
        n = self.op("Add", self.op("Mul", n, scale1), shift)
        w1, b1 = self.p("final_layer.linear.weight"), self.p("final_layer.linear.bias")
        w2, b2 = self.p("conv2.weight")[:, :, 0], self.p("conv2.bias")
        w2 = w2.astype(np.float64)         # the product of the two layers, rounded once
        return self.flin(n, (w2 @ w1).astype(np.float32), (w2 @ b1 + b2).astype(np.float32), "final_conv2",
                         out=OUTPUT)

    def build(self) -> None:
        b, d = self.b, self.d
        b.const("axis1", np.array([1], np.int64))
        b.const("end", np.array([END], np.int64))
        b.const("zero_i64", np.zeros(1, np.int64))
        b.const("thousand", np.array(1000.0, np.float32))
        b.const("ones_dim", np.ones(self.dim, np.float32))
        cos, sin = rope_tables(self.head_dim)
        b.const("rope_cos", cos)
        b.const("rope_sin", sin)
        t1 = self.timestep("t_embedder")
        cin = d.in_channels
        h = self.op("Add", self.flin("x", self.p("cond_x_merge_linear.weight")[:, :cin], None, "x_merge"), "cond")
        res = self.transformer(h, t1)
        if d.long_skip_connection:
            res = self.linear(self.op("Concat", res, self.frames_from("x", "cut"), axis=-1), "skip_linear")
        if d.final_layer_type != "wavenet":
            y = self.silu(self.linear(self.frames_from(res, "offset"), "final_mlp.0"))
            self.flin(y, self.p("final_mlp.2.weight"), self.p("final_mlp.2.bias"), "final_mlp.2", out=OUTPUT)
            return
        b.const("ones_wn", np.ones(self.wn.hidden_dim, np.float32))
        b.const("zeros_wn", np.zeros(self.wn.hidden_dim, np.float32))
        y = self.op("Add", self.wavenet(self.linear(res, "conv1"), self.timestep("t_embedder2")),
                    self.linear(res, "res_projection"))
        self.final_layer(self.frames_from(y, "offset"), t1)


def check_supported(args) -> None:
    d = args.DiT
    if d.is_causal:
        raise UsageError("IndexTTS2's S2Mel on onnxruntime attends over all frames; a causal DiT "
                         "(DiT.is_causal) needs --backend flow_estimator=mlx")
    if d.final_layer_type not in ("wavenet", "mlp"):
        raise UsageError(f"IndexTTS2's S2Mel on onnxruntime has no final layer {d.final_layer_type!r}; "
                         "use --backend flow_estimator=mlx")


def build_graph(source, args, data=None, data_name: str = "", quant: Quant | None = None):
    """The ONNX model of ``DiT.velocity`` from a weight source (``get``/``in``/``path``, float32
    numpy, names as in ``s2mel.pth``'s ``net``) and :class:`~ttscli.models.indextts2.s2mel.S2MelArgs`;
    ``quant``: the precision of the blocks' and the WaveNet's linear weights (float32, int8 or
    int4; the module docstring says which layers and how)."""
    from onnx import TensorProto, helper

    check_supported(args)
    b = Builder(quant or Quant("float32"), data, data_name, dynamic_int8=True)
    _Net(b, source, args).build()
    mel, f, i64 = args.DiT.in_channels, TensorProto.FLOAT, TensorProto.INT64
    inputs = [helper.make_tensor_value_info("x", f, ["batch", "time", mel]),
              helper.make_tensor_value_info("t", f, [1]),
              helper.make_tensor_value_info("cond", f, ["batch", "time", args.DiT.hidden_dim]),
              helper.make_tensor_value_info("cut", i64, [1]),
              helper.make_tensor_value_info("offset", i64, [1])]
    outputs = [helper.make_tensor_value_info(OUTPUT, f, ["batch", "frames", mel])]
    return finish(b, "indextts2_s2mel_dit", inputs, outputs)


def layout(args, precision: str = "float32") -> str:
    """What no tensor shape says: the head split, the rotary base, the skips, the final layer,
    the WaveNet's dilation rate, this module's graph version and, at int8, the CPU's int8 kernel."""
    d = args.DiT
    base = (f"indextts2/s2mel/{GRAPH_LAYOUT}/heads{d.num_heads}/rope{ROPE_BASE:g}/uvit{int(d.uvit_skip_connection)}"
            f"/longskip{int(d.long_skip_connection)}/{d.final_layer_type}/dilation{args.wavenet.dilation_rate}")
    return base + (f"/{dynamic_int8_tag()}" if precision == "int8" else "")


COMPONENT = GraphComponent(family="indextts2", name="flow_estimator", file="s2mel_dit.onnx",
                           variant="onnx-s2mel-float32", source_files=("s2mel.pth",), prefix=PREFIX, output=OUTPUT,
                           what="IndexTTS2's S2Mel DiT", keep=keep)


class OnnxVelocity:
    """The graph in a session, called as :meth:`DiT.velocity` is (MLX arrays in and out)."""

    def __init__(self, folder, reach: int):
        """``reach``: how many frames back the WaveNet's outputs see (0 without a WaveNet)."""
        self.session = COMPONENT.session(folder)
        self.reach = reach

    def __call__(self, x, t, cond, start: int = 0):
        """``x [B, T, 80]``, ``t [1]`` (one time for every row), ``cond [B, T, hidden]`` -> the
        velocity of frames ``start..T-1``, ``[B, T - start, 80]`` float32."""
        import mlx.core as mx

        T = x.shape[1]
        if T > MAX_POSITIONS:
            raise ValueError(f"the DiT takes at most {MAX_POSITIONS} frames, got {T}")
        if not 0 <= start < T:
            raise ValueError(f"start frame {start} outside the {T} frames")
        t = np.asarray(t, np.float32).reshape(-1)
        if t.size != 1 and not (t == t[0]).all():
            raise ValueError("the S2Mel graph takes one flow time shared by every row")
        cut = max(start - self.reach, 0)
        feeds = {"x": np.asarray(x, np.float32), "t": t[:1], "cond": np.asarray(cond, np.float32),
                 "cut": np.array([cut], np.int64), "offset": np.array([start - cut], np.int64)}
        return mx.array(self.session.run([OUTPUT], feeds)[0])


def attach(s2mel, checkpoint=None, model_id: str | None = None, precision: str = "float32") -> str:
    """Run ``s2mel``'s velocity network (an :class:`~ttscli.models.indextts2.s2mel.S2Mel`) on
    onnxruntime from now on: the graph of ``checkpoint``'s ``s2mel.pth`` found (or built once)
    in ttscli's cache by the file's hash, or, with ``checkpoint`` None, of the in-memory
    weights; ``precision``: its linear weights, float32 or int8 / int4. Returns the backend's
    name (``onnx-<precision>``)."""
    args = s2mel.args
    quant = Quant(precision)
    check_supported(args)
    est = s2mel.cfm.estimator
    COMPONENT.check_float32(est, "--backend flow_estimator=mlx")
    folder = COMPONENT.find_or_build(est, checkpoint, model_id, layout(args, precision),
                                     lambda src, data, name, q: build_graph(src, args, data, name, q),
                                     {"s2mel": args}, quant=quant)
    reach = est.wavenet.reach if args.DiT.final_layer_type == "wavenet" else 0
    s2mel.cfm.external_velocity = OnnxVelocity(folder, reach)
    return f"onnx-{precision}"
