"""The kokoro family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Family, Knob


def _load(spec, checkpoint, options):
    from .hooks import load_pipeline

    return load_pipeline(spec, checkpoint, options)


def _voices(spec, checkpoint):
    from .hooks import voice_names

    return voice_names(spec, checkpoint)


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
    name="kokoro",
    load=_load,
    knobs=(
        Knob("source_noise", bool, "Add upstream's random phase and noise to the harmonic source "
             "(seeded by --seed); off: deterministic, as the published ONNX graphs.", False),
    ),
    voices=_voices,
    convert={"mlx": _convert_mlx},
    bench_components=_bench_components,
    bench_rows=(("phonemize_s", "phonemize (s)", "{:.3f}"),
                ("prosody_s", "text + prosody (s)", "{:.3f}"),
                ("decoder_s", "decoder + iSTFT (s)", "{:.3f}"),
                ("pieces", "pieces", "{:.0f}")),
    peers={"onnxruntime": _peer},
    parity_checks=_parity,
    parity_against=("onnxruntime", "onnx"),
    honours=frozenset({"speed", "language", "voice", "stream"}),
)
