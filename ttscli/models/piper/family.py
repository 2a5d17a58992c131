"""The piper family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Family, Knob


def _load(spec, checkpoint, options):
    from . import load_pipeline

    return load_pipeline(spec, checkpoint, options)


def _convert_mlx(*args, **kwargs):
    from .hooks import convert_mlx

    return convert_mlx(*args, **kwargs)


def _bench_components(pipe, req):
    from .hooks import bench_components

    return bench_components(pipe, req)


def _peer(spec, checkpoint, text, repeats):
    from .hooks import bench_peer

    return bench_peer(spec, checkpoint, text, repeats)


def _parity(*args, **kwargs):
    from .parity import parity_checks

    return parity_checks(*args, **kwargs)


FAMILY = Family(
    name="piper",
    load=_load,
    knobs=(
        Knob("noise_scale", float, "VITS prior noise (the voice's own value by default).", 0.667, 0.0, 10.0),
        Knob("noise_w", float, "VITS duration noise (the voice's own value by default).", 0.8, 0.0, 10.0),
        Knob("length_scale", float, "Phoneme duration scale (>1: slower); --speed divides it.", 1.0, 0.05, 20.0),
        Knob("volume", float, "Output gain after peak normalisation.", 1.0, 0.0, 1.0),
        Knob("normalize", bool, "Peak-normalise each sentence as piper-tts does.", True),
    ),
    convert={"mlx": _convert_mlx},
    bench_components=_bench_components,
    bench_rows=(("phonemize_s", "phonemize (s)", "{:.3f}"),
                ("encoder_durations_s", "text encoder + durations (s)", "{:.3f}"),
                ("flow_decoder_s", "flow + HiFi-GAN (s)", "{:.3f}"),
                ("sentences", "sentences", "{:.0f}")),
    peers={"piper-tts": _peer},
    parity_checks=_parity,
    parity_against=("onnxruntime", "onnx"),
    honours=frozenset({"speed", "language", "voice"}),
)
