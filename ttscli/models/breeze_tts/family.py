"""The breeze_tts family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook, sampling_knobs

FAMILY = Family(
    name="breeze_tts",
    load=hook("ttscli.models.breeze_tts.load:load_pipeline"),
    knobs=(
        Knob("cfg_scale", float, "Classifier-free guidance scale, applied in the backbone and the depth decoder "
             "(1: off; needs --instruct; 2-4 recommended with an instruction; 0: the unconditional prompt alone).",
             default=1.0, min=0.0, max=20.0),
        *sampling_knobs(what="backbone, codebook 0",
                        names=("temperature", "top_k", "top_p", "repetition_penalty", "do_sample")),
        *sampling_knobs("depth_", "depth decoder, codebooks 1-15", names=("temperature", "top_k", "top_p")),
    ),
    convert={"mlx": hook("ttscli.models.breeze_tts.convert:convert_mlx"),
             "coreml": hook("ttscli.models.breeze_tts.coreml_export:convert_coreml"),
             "onnx": hook("ttscli.models.breeze_tts.onnx_export:convert_onnx")},
    bench_components=hook("ttscli.models.breeze_tts.bench:bench_components"),
    bench_rows=(("backbone_step_ms", "backbone step, median (ms)", "{:.2f}"),
                ("depth_frame_ms", "depth decoder, 15 codebooks (ms)", "{:.2f}")),
    parity_checks=hook("ttscli.models.breeze_tts.parity:parity_checks"),
    parity_against=("onnx", "onnx-f32", "onnx-int8", "onnx-int4"),
    batches=True,
    honours=frozenset({"voice", "instruct", "ref_audio", "save_voice", "max_frames", "stream"}),
    # the 12 Hz decoder is causal and streams exactly from one frame: first audio after frame 1
    first_chunk_frames=1,
    components=(
        Component("code_decoder", ("mlx", "coreml", "onnx"), onnx_precision=True,
                  why="Core ML and ONNX graphs come from `ttscli convert`"),
        Component("code_predictor", ("mlx", "onnx"), follows="code_decoder"),
    ),
    coreml_capacity=1024,
)
