"""The chatterbox family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook, sampling_knobs


def _voices(spec, checkpoint):
    # no preset names: the default voice (conds.pt), or a clone / saved voice file
    return []


FAMILY = Family(
    name="chatterbox",
    load=hook("ttscli.models.chatterbox.load:load_pipeline"),
    knobs=(
        Knob("exaggeration", float, "Emotion exaggeration fed to T3's conditioning (0.5: neutral; "
             "upstream suggests >= 0.7 for expressive speech).", 0.5, min=0.0, max=2.0),
        Knob("cfg_weight", float, "Classifier-free guidance weight on the text (0: off; ~0.3 for fast "
             "or cross-language references).", 0.5, min=0.0, max=5.0),
        Knob("watermark", bool, "Add Resemble's Perth watermark as upstream does (needs resemble-perth and "
             "PyTorch installed; off by default: ttscli's output is not watermarked).", False),
        *sampling_knobs(defaults={"temperature": 0.8, "min_p": 0.05, "top_p": 1.0, "repetition_penalty": 1.2},
                        names=("temperature", "min_p", "top_p", "repetition_penalty")),
    ),
    voices=_voices,
    convert={"mlx": hook("ttscli.models.chatterbox.convert:convert_mlx"),
             "coreml": hook("ttscli.models.chatterbox.coreml_export:convert_coreml"),
             "onnx": hook("ttscli.models.chatterbox.onnx_export:convert_onnx")},
    bench_components=hook("ttscli.models.chatterbox.bench:bench_components"),
    bench_rows=(("t3_prefill_s", "T3 prefill (s)", "{:.3f}"),
                ("t3_tokens_per_s", "T3 tokens/s (CFG: 2 rows)", "{:.1f}"),
                ("t3_s", "T3 total (s)", "{:.3f}"),
                ("s3gen_flow_onnx", "S3Gen flow estimator on onnxruntime (1: yes, 0: MLX)", "{:.0f}"),
                ("s3gen_flow_s", "S3Gen flow (s)", "{:.3f}"),
                ("s3gen_hift_onnx", "S3Gen HiFT decode on onnxruntime (1: yes, 0: MLX)", "{:.0f}"),
                ("s3gen_hift_s", "S3Gen HiFT (s)", "{:.3f}"),
                ("s3gen_passes", "S3Gen passes", "{:.0f}"),
                ("s3gen_s_per_audio_s", "S3Gen s per audio s", "{:.3f}")),
    parity_checks=hook("ttscli.models.chatterbox.parity:parity_checks"),
    parity_against=("onnx", "onnx-f32", "onnx-int8", "onnx-int4"),
    batches=True,
    honours=frozenset({"voice", "ref_audio", "save_voice", "max_frames", "stream"}),
    # S3Gen's first pass makes audio from 8 tokens: 3 of the flow's lookahead, 4 of vocoder context
    # (VOC_CONTEXT mel frames), 1 whose frames are then final (S3Gen.first_audio_tokens)
    first_chunk_frames=8,
    components=(
        Component("code_decoder", ("mlx", "coreml", "onnx"), onnx_precision=True,
                  why="Core ML and ONNX graphs come from `ttscli convert`"),
        # S3Gen on a Linux CPU: the flow estimator's float32 graph and HiFT's decode ran faster on
        # onnxruntime than on MLX (docs/benchmarks.md#cb-cpu-hift-e2e and #cb-cpu-peer-onnx)
        Component("flow_estimator", ("mlx", "onnx"), measured={("linux", ""): "onnx"}, on_gpu="mlx",
                  why="onnxruntime ran S3Gen's flow faster than MLX on a Linux CPU"),
        Component("vocoder", ("mlx", "onnx"), measured={("linux", ""): "onnx"}, on_gpu="mlx",
                  why="onnxruntime ran S3Gen's HiFT faster than MLX on a Linux CPU"),
    ),
    coreml_capacity=1024,
)
