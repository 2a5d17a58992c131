"""The piper family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook


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
    named=hook("ttscli.models.piper.voice:resolve_voice"),
    in_folder=hook("ttscli.models.piper.voice:for_model_dir"),
    components=(
        # On the project's Linux CPU the published graph on onnxruntime ran faster than piper-tts and
        # ttscli's MLX VITS slower (docs/benchmarks.md#piper-workers); on Apple silicon MLX runs on the
        # GPU. Other Linux CPUs (unmeasured): the graph piper-tts itself runs.
        Component("vits", ("mlx", "onnx"), measured={("linux", "AuthenticAMD"): "onnx", ("linux", ""): "onnx",
                                                     ("darwin", ""): "mlx"},
                  why="onnxruntime ran the published graph faster than ttscli's MLX VITS on a Linux CPU; "
                      "MLX uses the GPU on macOS",
                  random_weights="mlx"),
    ),
)
