"""VoxCPM2's local stacks on onnxruntime: the diffusion transformer (LocDiT,
``feat_decoder.estimator``) and the patch encoder (LocEnc, ``feat_encoder``).

LocDiT: only the network called once per Euler step moves; the steps, CFG-Zero*'s guidance and the
noise stay in :class:`~ttscli.models.voxcpm2.local.UnifiedCFM`, which calls :class:`OnnxLocDiT`
in its place when one is attached. The graph is built from the weights the loaded MLX LocDiT
holds (names as below ``feat_decoder.estimator.`` in model.safetensors), float32, a dynamic
row axis; the window is fixed by the config (2 condition tokens, the time token, the condition
patch and the noisy patch: 3 + 2 x patch_size positions), so its RoPE tables are constants.
The stack is :func:`ttscli.backends.onnx.graph.window_stack`.

Why: a patch calls the 12-layer, 1024-wide LocDiT nine times on CFG's two rows of 11
positions each, GEMMs too thin for MLX's CPU path (MKL's generic code on AMD); onnxruntime's
prepacked GEMMs run them faster (docs/benchmarks.md#voxcpm2-cpu-dit-onnx).

Which runs: ``--backend flow_estimator=mlx|onnx``; onnx by default on a Linux CPU, MLX on a GPU
and on macOS (the family's declaration). The graph computes in float32: a LocDiT held in
bfloat16 (``--dtype bfloat16``) is refused on onnx with one line.

LocEnc (``--backend patch_encoder=mlx|onnx``, the same defaults): each generated patch is encoded
back for the LMs' next step, and the reference's patches for the prompt: a learnt token in front
of the projected frames through a 12-layer bidirectional stack over ``1 + patch_size`` positions,
read at that token. MLX took about 115 ms a patch for it on the project's CPU (0.8 GB of weights
read for 5 positions); the float32 graph takes a fraction of that
(docs/benchmarks.md#voxcpm2-cpu-locenc-onnx).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from ttscli.backends.onnx.component import GraphComponent
from ttscli.backends.onnx.graph import Builder, Prefixed, Quant, dynamic_int8_tag, finish, window_stack

PREFIX = "feat_decoder.estimator."
INPUTS = ("x", "mu", "t", "cond", "dt")
OUTPUT = "velocity"
GRAPH_LAYOUT = 1
ENC_PREFIX = "feat_encoder."

COMPONENT = GraphComponent(family="voxcpm2", name="flow_estimator", file="locdit.onnx", variant="onnx-locdit-float32",
                           source_files=("model.safetensors",), prefix=PREFIX, output=OUTPUT,
                           what="VoxCPM2's diffusion transformer")
ENCODER = GraphComponent(family="voxcpm2", name="patch_encoder", file="locenc.onnx", variant="onnx-locenc-float32",
                         source_files=("model.safetensors",), prefix=ENC_PREFIX, output="hidden",
                         what="VoxCPM2's patch encoder")


def build_graph(source, stack_args, feat_dim: int, patch: int, attention_scale: float, data=None,
                data_name: str = "", quant: Quant | None = None):
    """The ONNX model of the LocDiT from a weight source (``get``/``in``/``path``, names as in
    model.safetensors); ``stack_args``: the DiT stack's :class:`~ttscli.lm.config.LMArgs`;
    ``quant``: the linear layers' weights (float32 unless int8 / int4)."""
    from onnx import TensorProto, helper

    b = Builder(quant or Quant("float32"), data, data_name, dynamic_int8=True)
    w = Prefixed(source, PREFIX)
    H = stack_args.hidden_size

    def op(name, *inputs, **attrs):
        return b.node(name, list(inputs), **attrs)[0]

    def linear(x, key):
        return b.linear(x, w[key + ".weight"], w.get(key + ".bias"), key)

    b.const("axis1", np.array([1], np.int64))
    half = H // 2
    b.const("time_freqs", 1000.0 * np.exp(np.arange(half, dtype=np.float32)
                                           * np.float32(-(math.log(10000) / (half - 1))))[None])

    def time_mlp(t, key):
        ang = op("Mul", op("Unsqueeze", t, "axis1"), "time_freqs")
        feats = op("Concat", op("Sin", ang), op("Cos", ang), axis=-1)
        h = linear(feats, key + ".linear_1")
        return linear(op("Mul", h, op("Sigmoid", h)), key + ".linear_2")

    te = op("Add", time_mlp("t", "time_mlp"), time_mlp("dt", "delta_time_mlp"))
    mu = op("Reshape", "mu", b.const("mu_tokens", np.array([0, -1, H], np.int64)))
    seq = op("Concat", mu, op("Unsqueeze", te, "axis1"), linear("cond", "cond_proj"), linear("x", "in_proj"), axis=1)
    length = 3 + 2 * patch
    out = window_stack(b, stack_args, Prefixed(source, PREFIX + "decoder."), seq, length,
                       attention_scale=attention_scale)
    tail = op("Slice", out, b.const("tail_start", np.array([length - patch], np.int64)),
              b.const("tail_end", np.array([length], np.int64)), "axis1")
    b.linear(tail, w["out_proj.weight"], w["out_proj.bias"], "out_proj", out=OUTPUT)
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f, ["rows", patch, feat_dim]),
              helper.make_tensor_value_info("mu", f, ["rows", 2 * H]),
              helper.make_tensor_value_info("t", f, ["rows"]),
              helper.make_tensor_value_info("cond", f, ["rows", patch, feat_dim]),
              helper.make_tensor_value_info("dt", f, ["rows"])]
    outputs = [helper.make_tensor_value_info(OUTPUT, f, ["rows", patch, feat_dim])]
    return finish(b, "voxcpm2_locdit", inputs, outputs)


class OnnxLocDiT:
    """The LocDiT graph in a session, called as the MLX LocDiT is (MLX arrays in and out)."""

    def __init__(self, folder: Path):
        self.session = COMPONENT.session(folder)

    def __call__(self, x, mu, t, cond, dt):
        import mlx.core as mx

        feeds = {n: np.asarray(v.astype(mx.float32) if isinstance(v, mx.array) else v, np.float32)
                 for n, v in zip(INPUTS, (x, mu, t, cond, dt), strict=True)}
        return mx.array(self.session.run([OUTPUT], feeds)[0])


def attach(model, checkpoint: Path | None = None, model_id: str | None = None, precision: str = "float32") -> None:
    """Run ``model``'s LocDiT (a :class:`~ttscli.models.voxcpm2.model.VoxCPM2`) on onnxruntime
    from now on: the graph of ``checkpoint``'s model.safetensors (or pytorch_model.bin) found
    (or built once) in ttscli's cache by the file's hash, or, with ``checkpoint`` None, of the
    in-memory weights."""
    cfm, a = model.feat_decoder, model.args
    COMPONENT.check_float32(cfm.estimator, "--backend flow_estimator=mlx (or --dtype float32)")
    folder = _find_or_build(COMPONENT, cfm.estimator, cfm.estimator.decoder, a.local(a.dit), a.patch_size,
                            checkpoint, model_id, build_graph, {"dit": a.dit}, a.feat_dim, Quant(precision))
    cfm.external_estimator = OnnxLocDiT(folder)


def _find_or_build(component: GraphComponent, module, stack, stack_args, patch: int, checkpoint: Path | None,
                   model_id: str | None, build, info: dict, feat_dim: int, quant: Quant) -> Path:
    """The graph of a local stack's ``module`` (its MLX ``stack`` gives the attention scale) by
    the checkpoint's main file or the weights' fingerprint; ``build(source, stack_args, feat_dim,
    patch, scale, data, data_name, quant)``."""
    from .load import main_file

    scale = float(stack.layers[0].self_attn.scale)
    if checkpoint is not None:
        component = dataclasses.replace(component, source_files=(main_file(Path(checkpoint)),))
    layout = (f"voxcpm2/{component.name}/{GRAPH_LAYOUT}/{stack_args.num_attention_heads}x{stack_args.head_dim}/"
              f"{stack_args.num_key_value_heads}/{patch}/{stack_args.rope.type}/{stack_args.residual_scale}/{scale}")
    if quant.precision == "int8":      # the int8 linears are run-time quantized (dynamic_int8_linear)
        layout += f"/{dynamic_int8_tag()}"
    return component.find_or_build(module, checkpoint, model_id, layout, lambda src, data, name, q: build(
        src, stack_args, feat_dim, patch, scale, data, name, q), info, quant=quant)


def build_encoder_graph(source, stack_args, feat_dim: int, patch: int, attention_scale: float, data=None,
                        data_name: str = "", quant: Quant | None = None):
    """The ONNX model of LocEnc: patches ``[N, P, D]`` -> the stack's output at the learnt token
    ``[N, H]`` (float32: the encoder is offered in float32 only)."""
    from onnx import TensorProto, helper

    b = Builder(quant or Quant("float32"), data, data_name, dynamic_int8=True)
    w = Prefixed(source, ENC_PREFIX)
    H = stack_args.hidden_size
    b.const("axis1", np.array([1], np.int64))
    h = b.linear("patches", w["in_proj.weight"], w["in_proj.bias"], "in_proj")                # [N, P, H]
    rows = b.node("Slice", [b.node("Shape", ["patches"])[0], b.const("s0", np.array([0], np.int64)),
                            b.const("s1", np.array([1], np.int64))])[0]
    shape = b.node("Concat", [rows, b.const("one_width", np.array([1, H], np.int64))], axis=0)[0]
    special = b.node("Expand", [b.const("special", w["special_token"].reshape(1, 1, H)), shape])[0]
    seq = b.node("Concat", [special, h], axis=1)[0]
    out = window_stack(b, stack_args, Prefixed(source, ENC_PREFIX + "encoder."), seq, patch + 1,
                       attention_scale=attention_scale)
    b.node("Gather", [out, b.const("first", np.array(0, np.int64))], ["hidden"], axis=1)
    f = TensorProto.FLOAT
    return finish(b, "voxcpm2_locenc", [helper.make_tensor_value_info("patches", f, ["rows", patch, feat_dim])],
                  [helper.make_tensor_value_info("hidden", f, ["rows", H])])


class OnnxLocEnc:
    """The LocEnc graph in a session, called as the MLX LocEnc is: ``[B, T, P, D]`` -> ``[B, T, H]``."""

    def __init__(self, folder: Path):
        self.session = ENCODER.session(folder)

    def __call__(self, x):
        import mlx.core as mx

        B, T, P, D = x.shape
        feed = np.asarray(x.astype(mx.float32)).reshape(B * T, P, D)
        out = self.session.run(["hidden"], {"patches": feed})[0]
        return mx.array(out.reshape(B, T, -1))


def attach_encoder(model, checkpoint: Path | None = None, model_id: str | None = None) -> None:
    """Run ``model``'s LocEnc on onnxruntime from now on (its float32 graph, cached as the LocDiT's is)."""
    enc, a = model.feat_encoder, model.args
    ENCODER.check_float32(enc, "--backend patch_encoder=mlx (or --dtype float32)")
    folder = _find_or_build(ENCODER, enc, enc.encoder, a.local(a.encoder), a.patch_size, checkpoint, model_id,
                            build_encoder_graph, {"encoder": a.encoder}, a.feat_dim, Quant("float32"))
    enc.external = OnnxLocEnc(folder)
