"""ONNX graph of a decoder-only LM (Qwen3 blocks with q/k norm, Llama blocks without) that
runs S positions per call on top of a KV cache, for onnxruntime's CPU kernels.

Built with ``onnx.helper`` from :class:`ttscli.lm.config.LMArgs` and tensors named as in the
checkpoint relative to the stack (``layers.0.self_attn.q_proj.weight``, ``norm.weight``), the
same contract as the Core ML export, so any family hands over its LM by choosing a prefix.

Per layer: RMSNorm (fused with the residual add), one fused q/k/v projection, per-head q/k
RMSNorm, ``com.microsoft.GroupQueryAttention`` (rotary applied inside from cos/sin tables,
causal, K/V written into a cache buffer that the runtime binds as both past and present, so
the cache is never copied), the output projection, then SwiGLU with gate and up fused.
Linear layers are MatMul on float32 weights or MatMulNBits on block-quantized ones (int8 or
int4, ``accuracy_level`` 4: int8 activations, the fast path on CPUs without AVX-512 VNNI).

Outputs: ``hidden`` (post-norm state of the last position, ``[B, H]``) and one logits output per
head (``logits`` or ``logits_0..n-1``), or, for a stack with several heads used one per step
(Qwen3-TTS's code predictor), one ``logits`` output whose head an int64 input picks through a
tree of ``If`` nodes: onnxruntime runs every node of the graph whatever outputs a run binds,
so 15 head outputs cost 15 heads per step (a large share more weights read at 0.6B;
docs/benchmarks.md#code-comment-figures).

A :class:`Style` builds Kyutai's block instead (LayerNorm with a bias, a tanh-GELU MLP of
``mlp.up_proj`` / ``mlp.down_proj``, RoPE on adjacent pairs), and a ``tail`` appends a family's
own nodes on ``hidden`` (Pocket TTS's EOS and flow heads), with inputs and outputs of its own.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ttscli.errors import CheckpointError, UsageError
from ttscli.backends.blocks import Style, style_shapes
from ttscli.lm.config import LMArgs
from ttscli.lm.rope import inv_freq

MS = "com.microsoft"
OPSET = 17
PRECISIONS = ("float32", "int8", "int4")
BLOCK_SIZES = (16, 32, 64, 128)


# a family's nodes on ``hidden``: tail(builder, hidden) -> (extra graph inputs, extra outputs), as value infos
Tail = Callable[["Builder", str], tuple[list, list]]


def rope_cache(args: LMArgs, positions: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin ``[positions, head_dim / 2]`` of the stack's RoPE, tabulated in float64.

    M-RoPE rotates like plain RoPE here: a codec LM feeds the same position to its three rows.
    """
    ang = np.arange(positions, dtype=np.float64)[:, None] * inv_freq(args.rope, args.head_dim)[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


@dataclass
class Quant:
    """How linear weights are stored: float32, or ``bits``-bit blocks of ``block_size`` along K."""

    precision: str = "float32"
    block_size: int = 32
    accuracy_level: int = 4

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise UsageError(f"ONNX precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.block_size not in BLOCK_SIZES:
            raise UsageError(f"block size must be one of {', '.join(map(str, BLOCK_SIZES))}, not {self.block_size}")

    @property
    def bits(self) -> int | None:
        return {"int8": 8, "int4": 4}.get(self.precision)


def block_quantize(w: np.ndarray, bits: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``w [N, K]`` (a checkpoint's ``[out, in]`` weight) -> MatMulNBits' packed ``B [N, blocks,
    blob]`` and ``scales [N * blocks]``, symmetric (the kernel's default zero point).

    Packed by onnxruntime's own C++ blockwise quantizer (what its MatMulNBits quantization
    tool calls), so the layout is the one the kernel reads; the tool's Python module is not
    used because it pulls extra packages (onnx_ir, neural-compressor helpers).
    """
    from onnxruntime.capi import _pybind_state as C

    N, K = w.shape
    blocks = -(-K // block_size)
    wk = np.ascontiguousarray(w.T, np.float32)            # [K, N], as MatMul's B
    if blocks * block_size != K:
        wk = np.pad(wk, ((0, blocks * block_size - K), (0, 0)))
    per = 8 // bits
    packed = np.zeros((N, blocks, -(-block_size // per)), np.uint8)
    zero = np.zeros((N, -(-blocks // per)), np.uint8)
    scales = np.zeros((N, blocks), np.float32)
    quantize = {8: C.quantize_matmul_8bits, 4: C.quantize_matmul_4bits}[bits]
    quantize(packed, wk, scales, zero, block_size, N, K, True)
    return packed, scales.reshape(-1)


@dataclass
class Builder:
    quant: Quant
    data: object | None = None             # open external-data file: big tensors go there at once
    data_name: str = ""
    nodes: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    n: int = 0
    # int8 linears as DynamicQuantizeMatMul (:func:`dynamic_int8_linear`) instead of MatMulNBits
    dynamic_int8: bool = False

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, name: str, a: np.ndarray) -> str:
        from onnx import numpy_helper

        a = np.asarray(a)
        if self.data is not None and a.nbytes >= 4096:
            # written now, so a float32 1.7B talker never sits in memory as one protobuf
            from onnx import TensorProto, helper

            t = TensorProto(name=name, dims=list(a.shape), data_type=helper.np_dtype_to_tensor_dtype(a.dtype))
            offset = self.data.tell()
            self.data.write(np.ascontiguousarray(a).tobytes())
            for k, v in (("location", self.data_name), ("offset", str(offset)), ("length", str(a.nbytes))):
                entry = t.external_data.add()
                entry.key, entry.value = k, v
            t.data_location = TensorProto.EXTERNAL
            self.inits.append(t)
            return name
        # np.ascontiguousarray turns a 0-d array into 1-d (a scalar Gather index must stay 0-d)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(a) if a.ndim else a, name))
        return name

    def node(self, op: str, inputs: list[str], outputs: int | list[str] = 1, domain: str = "", base: str = "",
             **attrs) -> list[str]:
        from onnx import helper

        outs = [self.name(base or op) for _ in range(outputs)] if isinstance(outputs, int) else outputs
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), domain=domain or None, **attrs))
        return outs

    def linear(self, x: str, w: np.ndarray, b: np.ndarray | None, name: str, out: str | None = None,
               dynamic: bool | None = None) -> str:
        """``x @ w.T + b`` for a checkpoint weight ``w [N, K]``; ``dynamic``: this layer's int8 kernel
        (None: the builder's ``dynamic_int8``)."""
        N, K = w.shape
        bits = self.quant.bits
        if bits == 8 and (self.dynamic_int8 if dynamic is None else dynamic):
            return dynamic_int8_linear(self, x, w, b, name, out)
        if bits is None:
            ins = [x, self.const(name + ".weight_t", np.asarray(w, np.float32).T)]
            if b is None:
                return self.node("MatMul", ins, [out] if out else 1)[0]
            y = self.node("MatMul", ins)[0]
            return self.node("Add", [y, self.const(name + ".bias", np.asarray(b, np.float32))], [out] if out else 1)[0]
        packed, scales = block_quantize(np.asarray(w, np.float32), bits, self.quant.block_size)
        ins = [x, self.const(name + f".weight_q{bits}", packed), self.const(name + ".scales", scales)]
        if b is not None:
            ins += ["", "", self.const(name + ".bias", np.asarray(b, np.float32))]
        return self.node("MatMulNBits", ins, [out] if out else 1, domain=MS, K=K, N=N, bits=bits,
                         block_size=self.quant.block_size, accuracy_level=self.quant.accuracy_level)[0]


@functools.lru_cache(maxsize=1)
def int8_weight_limit() -> int:
    """The largest int8 weight :func:`dynamic_int8_linear` stores on this CPU: 127, or 63 on an
    x86-64 CPU without VNNI, where onnxruntime's u8 x s8 kernel adds pairs of products in int16
    (two products of 255 x 63 still fit; of 255 x 127 they can saturate)."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return 127
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return 127 if {"avx512_vnni", "avx_vnni"} & set(flags) else 63


def dynamic_int8_tag() -> str:
    """What a graph of :func:`dynamic_int8_linear` layers depends on beyond its weights, for its
    cache layout (a graph built for a VNNI CPU is rebuilt on one without)."""
    return f"dynamic-int8-w{int8_weight_limit()}"


def dynamic_int8_linear(b: Builder, x: str, w: np.ndarray, bias: np.ndarray | None, name: str,
                        out: str | None = None) -> str:
    """``x @ w.T + bias`` for ``w [N, K]`` as onnxruntime's ``DynamicQuantizeMatMul``: the weight
    symmetric int8 per output channel (to :func:`int8_weight_limit`), ``x`` quantized to uint8 per
    tensor at run time, the product an integer GEMM (MLAS's u8s8 kernel: ``vpdpbusd`` on CPUs with
    AVX-512 VNNI or AVX-VNNI). On wide products it runs several times faster than block-quantized
    int8 (MatMulNBits) on such a CPU, and about as accurate where the activations have no outliers
    (one scale for the whole tensor): diffusion stacks after their norms, not LM hidden states."""
    w = np.asarray(w, np.float32)
    limit = np.float32(int8_weight_limit())
    scale = np.maximum(np.abs(w).max(axis=1), np.float32(1e-30)) / limit
    wq = np.clip(np.rint(w / scale[:, None]), -limit, limit).astype(np.int8)
    ins = [x, b.const(name + ".weight_i8", np.ascontiguousarray(wq.T)), b.const(name + ".scales", scale), ""]
    if bias is not None:
        ins.append(b.const(name + ".bias", np.asarray(bias, np.float32)))
    return b.node("DynamicQuantizeMatMul", ins, [out] if out else 1, domain=MS)[0]


class Prefixed:
    """A weight source (``get``/``in``/``path``) seen below ``prefix`` as a mapping of float32
    numpy arrays: ``w[key]`` is one clear line for a missing tensor, ``w.get(key)`` gives
    ``default`` instead (an optional bias)."""

    def __init__(self, source, prefix: str):
        self.src, self.prefix = source, prefix

    def __contains__(self, key: str) -> bool:
        return self.prefix + key in self.src

    def __getitem__(self, key: str) -> np.ndarray:
        if self.prefix + key not in self.src:
            raise CheckpointError(f"{getattr(self.src, 'path', 'weights')}: no tensor {self.prefix}{key}")
        return np.asarray(self.src.get(self.prefix + key), np.float32)

    def get(self, key: str, default=None):
        return self[key] if key in self else default


def finish(b: "Builder", name: str, inputs: list, outputs: list, contrib: bool = True):
    """The ONNX model of what ``b`` holds: the graph ``name`` over these value infos, the
    standard opset (and onnxruntime's contrib ops unless ``contrib`` is False), IR version 8."""
    from onnx import helper

    graph = helper.make_graph(b.nodes, name, inputs, outputs, initializer=b.inits)
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid(MS, 1)] if contrib else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="ttscli")
    model.ir_version = 8
    return model


def _qkv(b: "Builder", weights: Mapping[str, np.ndarray], h: str, a: str, args: LMArgs) -> list[str]:
    """q, k, v of a block's attention ``a`` (``layers.N.self_attn.``) from one fused projection of ``h``."""
    nh, kvh, hd = args.num_attention_heads, args.num_key_value_heads, args.head_dim
    wqkv = _cat(weights, [a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"])
    bqkv = _cat(weights, [a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"])
    split = b.const(a + "split", np.array([nh * hd, kvh * hd, kvh * hd], np.int64))
    return b.node("Split", [b.linear(h, wqkv, bqkv, a + "qkv_proj"), split], 3, axis=-1)


def _branch_scale(b: "Builder", args: LMArgs):
    """``y -> y * residual_scale`` (muP's branch scale), or the identity for a stack without one."""
    if args.residual_scale == 1.0:
        return lambda y: y
    scale = b.const("residual_scale", np.array(args.residual_scale, np.float32))
    return lambda y: b.node("Mul", [y, scale])[0]


def _cat(w: Mapping[str, np.ndarray], keys: list[str]) -> np.ndarray | None:
    if not all(k in w for k in keys):
        return None
    return np.concatenate([np.asarray(w[k], np.float32) for k in keys], axis=0)


def _head_tree(b: Builder, x: str, index: str, heads: list, vocab: int, out: str, lo: int = 0) -> None:
    """``out = heads[index - lo](x)``: a leaf is one head's linear layer; an inner node an
    ``If`` on ``index < lo + mid`` between two halves. A head's weights are initializers of
    its own branch: onnxruntime prepacks a subgraph's own initializers, not outer-scope ones
    a subgraph reads (int8 logits then differed by ~1% from the same head outside an If)."""
    from onnx import TensorProto, helper

    if len(heads) == 1:
        name, w = heads[0]
        b.linear(x, w, None, name, out=out)
        return
    mid = len(heads) // 2
    below = b.node("Less", [index, b.const(b.name("head_split"), np.array(lo + mid, np.int64))])[0]
    branches = []
    for part, start in ((heads[:mid], lo), (heads[mid:], lo + mid)):
        sub = Builder(b.quant, b.data, b.data_name, n=b.n)
        branch_out = sub.name(out)
        _head_tree(sub, x, index, part, vocab, branch_out, start)
        b.n = sub.n
        branches.append(helper.make_graph(sub.nodes, sub.name("head_branch"), [],
                                          [helper.make_tensor_value_info(branch_out, TensorProto.FLOAT,
                                                                         ["batch", vocab])], initializer=sub.inits))
    b.node("If", [below], [out], then_branch=branches[0], else_branch=branches[1])


def _norm(b: Builder, style: Style, weights: Mapping[str, np.ndarray], key: str, pending: str | None,
          resid: str, eps: float) -> tuple[str, str]:
    """(norm(resid + pending), resid + pending): the pre-norm of a sublayer fused with the
    residual add of the one before (none before the first); RMSNorm or LayerNorm by ``style``."""
    g = b.const(key + ".weight", np.asarray(weights[key + ".weight"], np.float32))
    if style.norm == "layer":
        beta = b.const(key + ".bias", np.asarray(weights[key + ".bias"], np.float32))
        if pending is None:
            return b.node("LayerNormalization", [resid, g, beta], epsilon=eps, axis=-1)[0], resid
        h, _, _, resid = b.node("SkipLayerNormalization", [pending, resid, g, beta], 4, MS, epsilon=eps)
        return h, resid
    if pending is None:
        return b.node("SimplifiedLayerNormalization", [resid, g], epsilon=eps, axis=-1)[0], resid
    h, _, _, resid = b.node("SkipSimplifiedLayerNormalization", [pending, resid, g], 4, MS, epsilon=eps)
    return h, resid


def _mlp(b: Builder, style: Style, args: LMArgs, weights: Mapping[str, np.ndarray], h: str, m: str) -> str:
    """SwiGLU with gate and up fused, or ``down(gelu_tanh(up(h)))`` (``FastGelu``: the tanh form)."""
    if style.mlp == "gelu_tanh":
        up = b.linear(h, weights[m + "up_proj.weight"], weights.get(m + "up_proj.bias"), m + "up_proj")
        act = b.node("FastGelu", [up], domain=MS)[0]
    else:
        gu = b.linear(h, _cat(weights, [m + "gate_proj.weight", m + "up_proj.weight"]),
                      _cat(weights, [m + "gate_proj.bias", m + "up_proj.bias"]), m + "gate_up_proj")
        gate, up = b.node("Split", [gu, b.const(m + "split", np.array([args.intermediate_size] * 2, np.int64))],
                          2, axis=-1)
        act = b.node("Mul", [b.node("Mul", [gate, b.node("Sigmoid", [gate])[0]])[0], up])[0]
    return b.linear(act, weights[m + "down_proj.weight"], weights.get(m + "down_proj.bias"), m + "down_proj")


def build_graph(args: LMArgs, weights: Mapping[str, np.ndarray], heads: Mapping[str, np.ndarray], *,
                max_positions: int, quant: Quant | None = None, in_proj: tuple[np.ndarray, np.ndarray] | None = None,
                name: str = "lm", data=None, data_name: str = "", head_select: str | None = None,
                style: Style | None = None, tail: Tail | None = None, all_positions: bool = False):
    """The ONNX model of the stack. ``heads``: output name -> head weight ``[V, H]`` (may be
    empty: hidden only). ``in_proj``: ``(weight [H, H_in], bias [H])`` applied to the input
    embeddings first (a predictor narrower than the LM feeding it). ``max_positions``: length
    of the RoPE tables, the most positions one cache can hold. ``data``: a binary file open for
    writing, where tensors of 4 KB and more are written as they are made (``data_name``: its
    file name next to the saved graph), else everything is held in the returned proto.
    ``head_select``: name of an int64 scalar input choosing one of ``heads`` (in their order)
    for a single ``logits`` output. ``style``: the block's flavour (:class:`Style`); ``tail``:
    a family's own nodes on ``hidden`` (:data:`Tail`). ``all_positions``: ``hidden`` holds every
    fed position's post-norm state ``[B, S, H]`` (a family that reads the whole prefill; no
    heads then). A stack without RoPE (``rope.type == "none"``) attends without rotation;
    ``args.residual_scale`` (muP) multiplies each branch before its add; the attention scale
    takes the RoPE's attention factor, as the MLX layer's does."""
    from onnx import TensorProto, helper

    if all_positions and (heads or tail or head_select):
        raise UsageError("a graph with every position's hidden state has no heads or tail")
    quant = quant or Quant()
    style = style or Style()
    need = style_shapes(args, style)
    problems = [k for k in need if k not in weights] + [k for k in need if k in weights
                                                           and tuple(np.shape(weights[k])) != need[k]]
    if problems:
        raise CheckpointError(f"LM tensors missing or mis-shaped: {', '.join(problems[:8])}")
    b = Builder(quant, data, data_name)
    H, hd = args.hidden_size, args.head_dim
    nh, kvh = args.num_attention_heads, args.num_key_value_heads
    eps = float(args.rms_norm_eps)
    h_in = H if in_proj is None else int(in_proj[0].shape[1])
    inputs = [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "seq", h_in]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
              helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    outputs = []
    kv_shape = ["batch", kvh, "cache", hd]
    rotary = args.rope.type != "none"
    if rotary:
        cos, sin = rope_cache(args, max_positions)
        b.const("cos_cache", cos)
        b.const("sin_cache", sin)
    branch = _branch_scale(b, args)
    b.const("heads_shape", np.array([0, 0, -1, hd], np.int64))
    b.const("flat_shape", np.array([0, 0, -1], np.int64))
    b.const("last", np.array(-1, np.int64))
    x = "inputs_embeds"
    if in_proj is not None:
        x = b.linear(x, in_proj[0], in_proj[1], "in_proj")
    resid, pending = x, None        # pending: the previous block's output, not yet added in
    for i in range(args.num_hidden_layers):
        p = f"layers.{i}."
        h, resid = _norm(b, style, weights, p + "input_layernorm", pending, resid, eps)
        a = p + "self_attn."
        q, k, v = _qkv(b, weights, h, a, args)
        if args.qk_norm:
            def norm(t: str, key: str, a: str = a) -> str:
                g = b.const(a + key + ".weight", np.asarray(weights[a + key + ".weight"], np.float32))
                t4 = b.node("Reshape", [t, "heads_shape"])[0]
                t4 = b.node("SimplifiedLayerNormalization", [t4, g], epsilon=eps, axis=-1)[0]
                return b.node("Reshape", [t4, "flat_shape"])[0]
            q, k = norm(q, "q_norm"), norm(k, "k_norm")
        past_k, past_v = f"past_key.{i}", f"past_value.{i}"
        inputs += [helper.make_tensor_value_info(past_k, TensorProto.FLOAT, kv_shape),
                   helper.make_tensor_value_info(past_v, TensorProto.FLOAT, kv_shape)]
        outputs += [helper.make_tensor_value_info(f"present_key.{i}", TensorProto.FLOAT, kv_shape),
                    helper.make_tensor_value_info(f"present_value.{i}", TensorProto.FLOAT, kv_shape)]
        attn = b.node("GroupQueryAttention", [q, k, v, past_k, past_v, "seqlens_k", "total_sequence_length",
                                              *(("cos_cache", "sin_cache") if rotary else ())],
                      [b.name(a + "attn"), f"present_key.{i}", f"present_value.{i}"], MS,
                      num_heads=nh, kv_num_heads=kvh, do_rotary=int(rotary),
                      rotary_interleaved=int(style.rope_interleaved),
                      scale=float(hd ** -0.5) * float(args.rope.attention_factor()) ** 2)[0]
        o = b.linear(attn, weights[a + "o_proj.weight"], weights.get(a + "o_proj.bias"), a + "o_proj")
        h, resid = _norm(b, style, weights, p + "post_attention_layernorm", branch(o), resid, eps)
        pending = branch(_mlp(b, style, args, weights, h, p + "mlp."))
    if all_positions:
        b.node("Identity", [_norm(b, style, weights, "norm", pending, resid, eps)[0]], ["hidden"])
        outputs.insert(0, helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", H]))
    else:
        normed, _ = _norm(b, style, weights, "norm", pending, resid, eps)
        hidden = b.node("Gather", [normed, "last"], ["hidden"], axis=1)[0]
        outputs.insert(0, helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", H]))
    vocab = {out_name: int(np.shape(w)[0]) for out_name, w in heads.items()}
    if head_select is not None:
        sizes = sorted(set(vocab.values()))
        if len(sizes) != 1:
            raise CheckpointError(f"heads chosen by an input must share one vocabulary, not {sizes}")
        inputs.append(helper.make_tensor_value_info(head_select, TensorProto.INT64, []))
        _head_tree(b, hidden, head_select, list(heads.items()), next(iter(vocab.values())), "logits")
        vocab = {"logits": next(iter(vocab.values()))}
    else:
        for out_name, w in heads.items():
            b.linear(hidden, w, None, out_name, out=out_name)
    for out_name, V in vocab.items():
        outputs.insert(len(outputs) - 2 * args.num_hidden_layers,
                       helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["batch", V]))
    if tail is not None:
        more_in, more_out = tail(b, hidden)
        inputs += more_in
        outputs[len(outputs) - 2 * args.num_hidden_layers:len(outputs) - 2 * args.num_hidden_layers] = more_out
    return finish(b, name, inputs, outputs)


def window_stack(b: Builder, args: LMArgs, weights: Mapping[str, np.ndarray], x: str, length: int, *,
                 attention_scale: float, style: Style | None = None) -> str:
    """A bidirectional pass of the stack over a window of ``length`` positions (0 .. length - 1)
    with no cache: ``x [B, length, H]`` -> the post-norm hidden states ``[B, length, H]``.

    For the short local stacks codec models run per patch (VoxCPM2's LocDiT): every position
    sees every other. Rotate-half RoPE (the MLX stack's) is ``q * cos + (q @ R) * sin`` per head
    on tables of the window; grouped k/v heads are repeated to the query heads for onnxruntime's
    ``MultiHeadAttention``; ``attention_scale`` is the MLX layer's own (a RoPE's attention factor
    included); each branch is multiplied by ``args.residual_scale`` (muP) before its add."""
    style = style or Style()
    if style.norm != "rms" or style.rope_interleaved or args.qk_norm:
        raise UsageError("window_stack builds RMSNorm, rotate-half RoPE stacks without q/k norms")
    need = style_shapes(args, style)
    bad = [k for k in need if k not in weights or tuple(np.shape(weights[k])) != need[k]]
    if bad:
        raise CheckpointError(f"stack tensors missing or mis-shaped: {', '.join(bad[:8])}")
    nh, kvh, hd = args.num_attention_heads, args.num_key_value_heads, args.head_dim
    eps = float(args.rms_norm_eps)
    rope = args.rope.type != "none"
    if rope:
        half = hd // 2
        cos, sin = rope_cache(args, length)                      # [length, hd / 2]
        b.const("win_cos", np.concatenate([cos, cos], -1)[:, None, :])     # [length, 1, hd]
        b.const("win_sin", np.concatenate([sin, sin], -1)[:, None, :])
        rot = np.zeros((hd, hd), np.float32)                     # x @ rot = [-x2, x1]
        rot[half:, :half] = -np.eye(half, dtype=np.float32)
        rot[:half, half:] = np.eye(half, dtype=np.float32)
        b.const("win_rot", rot)
    b.const("win_heads", np.array([0, 0, -1, hd], np.int64))
    b.const("win_flat", np.array([0, 0, -1], np.int64))
    rep = nh // kvh
    if rep > 1:
        b.const("win_kv5", np.array([0, 0, kvh, 1, hd], np.int64))
        b.const("win_kv_rep", np.array([1, 1, 1, rep, 1], np.int64))
    branch = _branch_scale(b, args)

    def rotate(t: str) -> str:
        t4 = b.node("Reshape", [t, "win_heads"])[0]                            # [B, L, heads, hd]
        turned = b.node("MatMul", [t4, "win_rot"])[0]
        t4 = b.node("Add", [b.node("Mul", [t4, "win_cos"])[0], b.node("Mul", [turned, "win_sin"])[0]])[0]
        return b.node("Reshape", [t4, "win_flat"])[0]

    def heads_of(t: str) -> str:
        """``[B, L, kvh * hd]`` -> ``[B, L, nh * hd]``: each kv head repeated for its query heads."""
        if rep == 1:
            return t
        t5 = b.node("Reshape", [t, "win_kv5"])[0]
        return b.node("Reshape", [b.node("Tile", [t5, "win_kv_rep"])[0], "win_flat"])[0]

    resid, pending = x, None
    for i in range(args.num_hidden_layers):
        p = f"layers.{i}."
        h, resid = _norm(b, style, weights, p + "input_layernorm", pending, resid, eps)
        a = p + "self_attn."
        q, k, v = _qkv(b, weights, h, a, args)
        if rope:
            q, k = rotate(q), rotate(k)
        y = b.node("MultiHeadAttention", [q, heads_of(k), heads_of(v)], domain=MS, num_heads=nh,
                   scale=float(attention_scale))[0]
        o = b.linear(y, weights[a + "o_proj.weight"], weights.get(a + "o_proj.bias"), a + "o_proj")
        h, resid = _norm(b, style, weights, p + "post_attention_layernorm", branch(o), resid, eps)
        pending = branch(_mlp(b, style, args, weights, h, p + "mlp."))
    return _norm(b, style, weights, "norm", pending, resid, eps)[0]
