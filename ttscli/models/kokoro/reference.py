"""The published Kokoro ONNX graph under onnxruntime, as the parity reference (optional dependency).

Two references come from the one published file (kokoro-onnx's ``kokoro-v1.0.int8.onnx``):

- ``OnnxKokoro(path)``: the graph as published (int8 weights, activations quantized per run).
- ``OnnxKokoro(path, float_twin=True)``: its float twin. Every DynamicQuantizeLinear ->
  MatMulInteger / ConvInteger -> (int32 bias add) -> Cast -> Mul chain becomes a float MatMul /
  Conv on the dequantized weight (``(q - zero_point) * scale``; the float bias is the first input
  of the ``Div(bias, scale)`` node that quantized it at run time), every DynamicQuantizeLSTM an
  ONNX LSTM, then nodes nothing reads are dropped. The rest of the graph is upstream's own ops.

This is written apart from convert.py on purpose: the twin rewrites the graph node by node,
convert.py maps initializers to our module names, so a slip in one does not hide in the other.

Intermediate tensors are exposed as outputs (durations, F0, N, the harmonic source, the STFT
features that feed ``noise_convs``, ``conv_post``). ``teacher_forced=True`` also turns the
durations and the STFT features into graph inputs, so the decoder can be compared on the
reference's own features (ORT's STFT leaves noise in the Nyquist bin's phase; see docs/parity.md).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from ttscli.errors import BackendUnavailableError

# name in the graph -> our name
TAPS = {
    "/encoder/Clip_output_0": "durations",
    "/encoder/F0_proj/Conv_output_0": "f0",
    "/encoder/N_proj/Conv_output_0": "n",
    "/decoder/decoder/generator/m_source/l_tanh/Tanh_output_0": "har",
    "/decoder/decoder/generator/Concat_3_output_0": "har_features",
    "/decoder/decoder/generator/conv_post/Conv_output_0": "conv_post",
}
FORCED = ("/encoder/Clip_output_0", "/decoder/decoder/generator/Concat_3_output_0")
# the ONNX iSTFT leaves its output 1.5x torch.istft's level (module docstring of model.py)
ONNX_GAIN = 1.5


def _arr(init) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(init)


def float_twin(model) -> None:
    """Rewrite ``model`` (an onnx ModelProto) in place into its float twin."""
    from onnx import helper, numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = defaultdict(list)
    for n in g.node:
        for i in n.input:
            consumers[i].append(n)
    new_inits, drop, add = [], set(), []

    def const(name):
        return _arr(inits[name])

    def float_input(qname):
        dq = producer[qname]
        assert dq.op_type == "DynamicQuantizeLinear", dq.op_type
        return dq.input[0]

    def chain_end(start):
        """Follow Add/Cast from an integer product to the Mul that rescales it; (mul, bias)."""
        node, bias = consumers[start][0], None
        drop_nodes = []
        while node.op_type != "Mul":
            if node.op_type == "Add":
                other = node.input[1] if node.input[0] == start else node.input[0]
                b = producer[other]                                  # Reshape <- Cast <- Floor <- Div
                while b.op_type != "Div":
                    b = producer[b.input[0]]
                bias = b.input[0]
            drop_nodes.append(node)
            start = node.output[0]
            node = consumers[start][0]
        return node, bias, drop_nodes

    for n in list(g.node):
        if n.op_type in ("MatMulInteger", "ConvInteger"):
            w = const(n.input[1]).astype(np.float64)
            zp = const(n.input[3]).astype(np.float64) if len(n.input) > 3 and n.input[3] else 0.0
            scale = const(n.input[1][: -len("_quantized")] + "_scale").astype(np.float64)
            wf = (w - zp) * scale          # ConvInteger: per tensor; MatMulInteger: per output column
            wname = n.name + "/float_weight"
            new_inits.append(numpy_helper.from_array(wf.astype(np.float32), wname))
            mul, bias, between = chain_end(n.output[0])
            inputs = [float_input(n.input[0]), wname]
            if n.op_type == "ConvInteger":
                if bias:
                    inputs.append(bias)
                attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
                add.append(helper.make_node("Conv", inputs, [mul.output[0]], name=n.name + "/float", **attrs))
            else:
                add.append(helper.make_node("MatMul", inputs, [mul.output[0]], name=n.name + "/float"))
            drop.update(x.name for x in (n, mul, *between))
        elif n.op_type == "DynamicQuantizeLSTM":
            i = list(n.input)
            ws = []
            for q, s, z in ((i[1], i[8], i[9]), (i[2], i[10], i[11])):
                zp = const(z).astype(np.float64).reshape(-1, 1, 1) if z else 0.0
                wf = (const(q).astype(np.float64) - zp) * const(s).astype(np.float64).reshape(-1, 1, 1)
                ws.append(np.ascontiguousarray(np.transpose(wf, (0, 2, 1))).astype(np.float32))
            names = [n.name + "/W", n.name + "/R"]
            new_inits += [numpy_helper.from_array(a, nm) for a, nm in zip(ws, names)]
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            add.append(helper.make_node("LSTM", [i[0], names[0], names[1], *i[3:8]], list(n.output),
                                        name=n.name + "/float", **attrs))
            drop.add(n.name)
    _replace_nodes(g, [n for n in g.node if n.name not in drop] + add)
    g.initializer.extend(new_inits)
    _toposort(g)


def _replace_nodes(g, nodes) -> None:
    from onnx import NodeProto

    copies = []
    for n in nodes:
        c = NodeProto()
        c.CopyFrom(n)
        copies.append(c)
    del g.node[:]
    g.node.extend(copies)


def _toposort(g) -> None:
    avail = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    pending, order = list(g.node), []
    while pending:
        rest = []
        for n in pending:
            if all(i in avail for i in n.input):
                order.append(n)
                avail.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise ValueError(f"graph has a cycle or a dangling input near {rest[0].name}")
        pending = rest
    _replace_nodes(g, order)


def _prune(g) -> None:
    """Drop nodes (and initializers) that no graph output depends on."""
    producer = {o: n for n in g.node for o in n.output}
    need = [o.name for o in g.output]
    live, seen = set(), set()
    while need:
        t = need.pop()
        if t in seen:
            continue
        seen.add(t)
        n = producer.get(t)
        if n is not None and n.name not in live:
            live.add(n.name)
            need.extend(n.input)
    kept = [n for n in g.node if n.name in live]
    _replace_nodes(g, kept)
    used = {i for n in kept for i in n.input}
    inits = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(inits)


def build(onnx_path: Path, float_twin_: bool = False, teacher_forced: bool = False):
    """The ModelProto with TAPS as extra outputs (and FORCED as inputs when teacher_forced)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(onnx_path))
    if float_twin_:
        float_twin(model)
    g = model.graph
    have = {o.name for o in g.output}
    for name in TAPS:
        if name not in have and not (teacher_forced and name in FORCED):
            g.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    if teacher_forced:
        _replace_nodes(g, [n for n in g.node if not any(o in FORCED for o in n.output)])
        for name in FORCED:
            g.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    _prune(g)
    return model


class OnnxKokoro:
    """``ref(tokens, style, speed)`` -> dict of audio and the TAPS (numpy, batch axis removed)."""

    def __init__(self, onnx_path: Path, float_twin: bool = False, teacher_forced: bool = False,
                 threads: int = 2, optimize: bool = True):
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise BackendUnavailableError("onnxruntime is not installed: pip install onnxruntime") from err
        self.teacher_forced = teacher_forced
        model = build(Path(onnx_path), float_twin, teacher_forced)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        if not optimize:
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        self.outputs = [o.name for o in self.session.get_outputs()]

    def __call__(self, tokens, style, speed: float = 1.0, durations=None, har_features=None) -> dict:
        feeds = {
            "tokens": np.asarray([list(tokens)], np.int64),
            "style": np.asarray(style, np.float32).reshape(1, 256),
            "speed": np.array([speed], np.float32),
        }
        if self.teacher_forced:
            feeds[FORCED[0]] = np.asarray(durations, np.float32).reshape(1, -1)
            feeds[FORCED[1]] = np.asarray(har_features, np.float32).reshape(1, 22, -1)
        got = dict(zip(self.outputs, self.session.run(None, feeds)))
        out = {"audio": got["audio"].reshape(-1)}
        for name, ours in TAPS.items():
            if name in got:
                out[ours] = np.squeeze(got[name], 0) if got[name].ndim > 1 else got[name]
        return out
