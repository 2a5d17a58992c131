"""The piper family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Family, Knob, hook


FAMILY = Family(
    name="piper",
    load=hook("ttscli.models.piper.load:load_pipeline"),
    knobs=(
        Knob("noise_scale", float, "VITS prior noise (the voice's own value by default).", 0.667, 0.0, 10.0),
        Knob("noise_w", float, "VITS duration noise (the voice's own value by default).", 0.8, 0.0, 10.0),
        Knob("length_scale", float, "Phoneme duration scale (>1: slower); --speed divides it.", 1.0, 0.05, 20.0),
        Knob("volume", float, "Output gain after peak normalisation.", 1.0, 0.0, 1.0),
        Knob("normalize", bool, "Peak-normalise each sentence as piper-tts does.", True),
    ),
    convert={"mlx": hook("ttscli.models.piper.convert:convert_mlx")},
    bench_components=hook("ttscli.models.piper.bench:bench_components"),
    bench_rows=(("phonemize_s", "phonemize (s)", "{:.3f}"),
                ("encoder_durations_s", "text encoder + durations (s)", "{:.3f}"),
                ("flow_decoder_s", "flow + HiFi-GAN (s)", "{:.3f}"),
                ("sentences", "sentences", "{:.0f}")),
    peers={"piper-tts": hook("ttscli.models.piper.bench:bench_peer")},
    parity_checks=hook("ttscli.models.piper.parity:parity_checks"),
    parity_against=("onnxruntime", "onnx"),
    honours=frozenset({"speed", "language", "voice"}),
)
