"""S3Gen's HiFT vocoder, its ``decode`` part, on onnxruntime.

``decode(mel, source)``: the source's STFT, conv_pre, the upsampling stages with the source
injected at each, the resblocks, conv_post, exp / sin and the iSTFT. The F0 predictor and the
harmonic source stay on MLX (:class:`~ttscli.codecs.s3gen.hift.HiFTGenerator`): the
source's phase sum runs in float64 on purpose and its random draws are ours to replay. The
graph is built from the MLX model's float32 weights (names as in s3gen.safetensors below
``mel2wav.``, weight norm folded) with the generator emitters Kokoro's decoder uses
(:mod:`ttscli.backends.onnx.vocoder`): ``[1, C, 1, T]`` tensors, ``1 x k`` 2-D convs, Snake's
multiplies folded into the convs.

Why: on the project's 2-core AVX2 CPU the decode runs well over twice as fast under onnxruntime
as on MLX, within 1.7e-4 of MLX's output (docs/benchmarks.md#cb-cpu-hift-alone).

Where the graph lives: built from a checkpoint, in ttscli's cache
(``paths.converted_dir(MODEL, "onnx-hift-float32")``), found by the sha256 of
s3gen.safetensors and rebuilt when stale; from an in-memory model (``--random-weights``), under
a fingerprint of its weights (ttscli.backends.onnx.convert).

Which runs: ``--backend vocoder=mlx|onnx``; by default onnx on a Linux CPU where onnxruntime is
installed, MLX elsewhere (macOS, a GPU): the chatterbox family declares it (its family.py),
ttscli.backends.select resolves it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ttscli.backends.onnx.component import FLOAT32, GraphComponent
from ttscli.backends.onnx.graph import Builder, finish
from ttscli.backends.onnx.vocoder import ConvNet, istft, stft
from ttscli.errors import CheckpointError

from .hift import HiFTArgs

FAMILY = "chatterbox"          # the manifest's family: built from Chatterbox's s3gen.safetensors (a cached graph's key)
GRAPH_LAYOUT = 1
PREFIX = "mel2wav."
INPUTS = ("mel", "source")
OUTPUT = "wav"
# the F0 predictor and the source's linear layer stay on MLX
DECODE_PARTS = ("conv_pre.", "ups.", "source_downs.", "source_resblocks.", "resblocks.", "conv_post.")
COMPONENT = GraphComponent(family=FAMILY, name="vocoder", file="hift_decode.onnx", variant="onnx-hift-float32",
                           source_files=("s3gen.safetensors",), prefix=PREFIX, output=OUTPUT, what="S3Gen's HiFT",
                           external_data=False, keep=lambda k: k.startswith(DECODE_PARTS))
FILE, VARIANT = COMPONENT.file, COMPONENT.variant


class _Weights:
    """A weight source seen below ``mel2wav.``, one clear line for a missing tensor."""

    def __init__(self, source):
        self.src = source

    def __contains__(self, key: str) -> bool:
        return PREFIX + key in self.src

    def get(self, key: str):
        if PREFIX + key not in self.src:
            raise CheckpointError(f"{getattr(self.src, 'path', 'weights')}: no tensor {PREFIX}{key}")
        return self.src.get(PREFIX + key)


def build_decode(source, a: HiFTArgs):
    """The ONNX model of ``HiFTGenerator.decode``: ``mel [T, 80]``, ``source [T * 480]`` ->
    ``wav [T * 480]``, from a weight source (``get``/``in``, float32 numpy, names as in
    s3gen.safetensors, weight norm folded)."""
    from onnx import TensorProto, helper

    b = Builder(FLOAT32)
    net = ConvNet(b, _Weights(source), conv2d=True)
    op, i64 = net.op, net.i64
    ax2 = i64([2], "ax2")

    mel = op("Unsqueeze", op("Unsqueeze", op("Transpose", "mel", perm=[1, 0]), i64([0], "ax0")), ax2)  # [1, 80, 1, T]
    s = op("Unsqueeze", stft(b, op("Reshape", "source", i64([1, 1, -1], "shape3")), a.n_fft, a.hop_len), ax2)
    x = net.conv(mel, "conv_pre", pad=(3, 3))
    nk = len(a.resblock_kernel_sizes)
    n_ups = len(a.upsample_rates)
    down = np.cumprod([1, *a.upsample_rates[::-1][:-1]])[::-1]
    for i, (u, k) in enumerate(zip(a.upsample_rates, a.upsample_kernel_sizes)):
        x = net.conv_t(op("LeakyRelu", x, alpha=a.lrelu_slope), f"ups.{i}", u, (k - u) // 2)
        if i == n_ups - 1:
            x = net.reflect_pad_left(x)
        r = int(down[i])
        src = net.conv(s, f"source_downs.{i}") if r == 1 else \
            net.conv(s, f"source_downs.{i}", stride=r, pad=(r // 2, r // 2))
        src = net.resblock(src, f"source_resblocks.{i}", a.source_resblock_kernel_sizes[i],
                           a.source_resblock_dilation_sizes[i], _alpha)
        x = op("Add", x, src)
        x = net.mean_of_resblocks(x, [(f"resblocks.{i * nk + j}", kk, d) for j, (kk, d) in
                                      enumerate(zip(a.resblock_kernel_sizes, a.resblock_dilation_sizes))],
                                  alpha=_alpha)
    x = op("Squeeze", net.conv(op("LeakyRelu", x, alpha=0.01), "conv_post", pad=(3, 3)), ax2)
    bins = a.n_fft // 2 + 1
    mag = op("Min", op("Exp", op("Slice", x, i64([0]), i64([bins]), i64([1]))), net.f32(1e2))
    phase = op("Sin", op("Slice", x, i64([bins]), i64([2 * bins]), i64([1])))
    y = op("Clip", istft(b, mag, phase, a.n_fft, a.hop_len), net.f32(-a.audio_limit), net.f32(a.audio_limit))
    b.node("Reshape", [y, i64([-1], "flat")], [OUTPUT])
    f = TensorProto.FLOAT
    return finish(b, "s3gen_hift_decode", [helper.make_tensor_value_info("mel", f, ["frames", a.in_channels]),
                                           helper.make_tensor_value_info("source", f, ["samples"])],
                  [helper.make_tensor_value_info(OUTPUT, f, ["samples"])], contrib=False)


def _alpha(block: str, stage: int, j: int) -> str:
    return f"{block}.activations{stage}.{j}.alpha"


# ----------------------------------------------------------------------------- export and cache


def _layout(a: HiFTArgs) -> str:
    # rates, kernels and dilations are not all in the tensors' shapes: they belong to the graph's identity
    return (f"{FAMILY}/{COMPONENT.name}/{GRAPH_LAYOUT}/{a.upsample_rates}/{a.upsample_kernel_sizes}/"
            f"{a.resblock_kernel_sizes}/{a.source_resblock_kernel_sizes}/{a.n_fft}/{a.hop_len}")


def _build(a: HiFTArgs):
    return lambda source, data, data_name, quant: build_decode(source, a)


def export_decode(source, a: HiFTArgs, out_dir: Path, *, model_id: str, source_record: dict) -> dict:
    """``hift_decode.onnx`` and the manifest into ``out_dir``."""
    return COMPONENT.export(source, out_dir, _build(a), model_id=model_id, source_record=source_record,
                            layout=_layout(a), info={"hift": a})


def _params(hift) -> dict:
    return COMPONENT.params(hift)


def find_or_build(hift, checkpoint: Path | None, model_id: str | None = None) -> Path:
    """The decode graph of ``hift`` (loaded from ``checkpoint``'s s3gen.safetensors, a Chatterbox
    folder, its weight norm folded) in ttscli's cache, found by the file's hash and built once
    when missing or stale; with ``checkpoint`` None, by the weights' fingerprint."""
    return COMPONENT.find_or_build(hift, checkpoint, model_id, _layout(hift.a), _build(hift.a), {"hift": hift.a})


def build_from_model(hift) -> Path:
    """The decode graph of an in-memory HiFT (random or perturbed weights), cached by a
    fingerprint of its weights."""
    return find_or_build(hift, None)


# ----------------------------------------------------------------------------- runtime


class OnnxDecode:
    """The decode graph in a session, called as ``HiFTGenerator.decode`` is (MLX arrays in and out)."""

    def __init__(self, folder: Path):
        # the tensors grow with the utterance: no arena (GraphComponent.session)
        self.session = COMPONENT.session(folder)

    def __call__(self, mel, source):
        import mlx.core as mx

        feeds = {"mel": np.asarray(mel, np.float32), "source": np.asarray(source, np.float32)}
        return mx.array(self.session.run([OUTPUT], feeds)[0])


def attach(hift, checkpoint: Path | None, model_id: str | None = None) -> None:
    """Run ``hift.decode`` on onnxruntime from now on: the graph converted from ``checkpoint``'s
    s3gen.safetensors (a Chatterbox folder), or, with ``checkpoint`` None, from the in-memory
    weights. The graph computes in float32: a decoder held in another dtype is refused."""
    COMPONENT.check_float32(hift, "--backend vocoder=mlx")
    hift.external_decode = OnnxDecode(find_or_build(hift, None if checkpoint is None else Path(checkpoint), model_id))
