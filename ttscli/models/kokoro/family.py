"""The kokoro family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook


FAMILY = Family(
    name="kokoro",
    load=hook("ttscli.models.kokoro.load:load_pipeline"),
    knobs=(
        Knob("source_noise", bool, "Add upstream's random phase and noise to the harmonic source "
             "(seeded by --seed); off: deterministic, as the published ONNX graphs.", False),
    ),
    voices=hook("ttscli.models.kokoro.load:voice_names"),
    convert={"mlx": hook("ttscli.models.kokoro.convert:convert_mlx"),
             "onnx": hook("ttscli.models.kokoro.onnx_export:convert_onnx")},
    bench_components=hook("ttscli.models.kokoro.bench:bench_components"),
    bench_rows=(("phonemize_s", "phonemize (s)", "{:.3f}"),
                ("prosody_s", "text + prosody (s)", "{:.3f}"),
                ("decoder_s", "decoder + iSTFT (s)", "{:.3f}"),
                ("pieces", "pieces", "{:.0f}")),
    peers={"onnxruntime": hook("ttscli.models.kokoro.bench:bench_peer")},
    parity_checks=hook("ttscli.models.kokoro.parity:parity_checks"),
    parity_against=("onnxruntime", "onnx"),
    honours=frozenset({"speed", "language", "voice", "stream"}),
    first_audio="its first sentence or clause (at most 100 phonemes)",
    components=(
        # On the project's Linux CPU ttscli's float32 graphs on onnxruntime ran about twice as fast
        # as MLX float32 and faster than the published int8 graph (docs/benchmarks.md#kokoro-backends-busy).
        # Other Linux CPUs (unmeasured): onnx too.
        Component("acoustic", ("mlx", "onnx"), measured={("linux", "AuthenticAMD"): "onnx", ("linux", ""): "onnx",
                                                         ("darwin", ""): "mlx"},
                  on_gpu="mlx",
                  why="onnxruntime ran twice as fast as MLX on a Linux CPU"),
    ),
)
