"""The qwen3_tts family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Family, Knob, sampling_knobs


def _load(spec, checkpoint, options):
    from . import load_pipeline

    return load_pipeline(spec, checkpoint, options)


def _voices(spec, checkpoint):
    return spec.voices


def _convert_mlx(*args, **kwargs):
    from .convert import convert_mlx

    return convert_mlx(*args, **kwargs)


def _convert_coreml(*args, **kwargs):
    from . import convert_coreml

    return convert_coreml(*args, **kwargs)


def _convert_onnx(*args, **kwargs):
    from .onnx_export import convert_onnx

    return convert_onnx(*args, **kwargs)


def _bench_components(pipe, req):
    from . import bench_components

    return bench_components(pipe, req)


def _parity(*args, **kwargs):
    from .parity import parity_checks

    return parity_checks(*args, **kwargs)


FAMILY = Family(
    name="qwen3_tts",
    load=_load,
    knobs=(
        *sampling_knobs(what="talker, codebook 0"),
        *sampling_knobs("subtalker_", "code predictor, codebooks 1-15",
                        names=("temperature", "top_k", "top_p", "do_sample")),
        Knob("x_vector_only", bool, "Clone from the speaker embedding only (no --ref-text, no reference codes).",
             False, commands=("clone",)),
        Knob("non_streaming_mode", bool, "Put the whole text in the prompt before the first frame "
             "(upstream's non_streaming_mode; default: off for Base clone, on otherwise)."),
    ),
    voices=_voices,
    convert={"mlx": _convert_mlx, "coreml": _convert_coreml, "onnx": _convert_onnx},
    bench_components=_bench_components,
    bench_rows=(("talker_step_ms", "talker step, median (ms)", "{:.2f}"),
                ("code_predictor_frame_ms", "code predictor, 15 steps (ms)", "{:.2f}")),
    parity_checks=_parity,
    parity_against=("mlx", "coreml", "onnx", "onnx-f32", "onnx-int8", "onnx-int4"),
    honours=frozenset({"voice", "instruct", "language", "ref_audio", "save_voice", "max_frames", "stream"}),
)
