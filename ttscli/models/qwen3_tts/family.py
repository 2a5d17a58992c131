"""The qwen3_tts family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook, sampling_knobs


FAMILY = Family(
    name="qwen3_tts",
    load=hook("ttscli.models.qwen3_tts.load:load_pipeline"),
    knobs=(
        *sampling_knobs(what="talker, codebook 0"),
        *sampling_knobs("subtalker_", "code predictor, codebooks 1-15",
                        names=("temperature", "top_k", "top_p", "do_sample")),
        Knob("x_vector_only", bool, "Clone from the speaker embedding only (no --ref-text, no reference codes).",
             False, commands=("clone",)),
        Knob("non_streaming_mode", bool, "Put the whole text in the prompt before the first frame "
             "(upstream's non_streaming_mode; default: off for Base clone, on otherwise)."),
    ),
    convert={"mlx": hook("ttscli.models.qwen3_tts.convert:convert_mlx"),
             "coreml": hook("ttscli.models.qwen3_tts.coreml_export:convert_coreml"),
             "onnx": hook("ttscli.models.qwen3_tts.onnx_export:convert_onnx")},
    bench_components=hook("ttscli.models.qwen3_tts.bench:bench_components"),
    bench_rows=(("talker_step_ms", "talker step, median (ms)", "{:.2f}"),
                ("code_predictor_frame_ms", "code predictor, 15 steps (ms)", "{:.2f}"),
                ("code_predictor_one_kernel", "code predictor as one CUDA kernel (1: yes, 0: no)", "{:.0f}", "cuda"),
                # MLX counts no kernel launches: non-view primitives of the graph after mx.compile fusion
                ("kernels_per_frame", "kernels per frame (graph primitives)", "{:.0f}"),
                ("kernels_talker_step", "  of which talker step", "{:.0f}"),
                ("kernels_code_predictor_frame", "  of which code predictor", "{:.0f}")),
    parity_checks=hook("ttscli.models.qwen3_tts.parity:parity_checks"),
    parity_against=("mlx", "coreml", "onnx", "onnx-f32", "onnx-int8", "onnx-int4"),
    batches=True,
    bench_batch=hook("ttscli.models.qwen3_tts.batched:bench_batch"),
    honours=frozenset({"voice", "instruct", "language", "ref_audio", "save_voice", "max_frames", "stream"}),
    # the 12 Hz decoder is causal and streams exactly from one frame: first audio after frame 1
    first_chunk_frames=1,
    components=(
        Component("code_decoder", ("mlx", "coreml", "onnx"), onnx_precision=True,
                  why="Core ML and ONNX graphs come from `ttscli convert`"),
        Component("code_predictor", ("mlx", "onnx"), follows="code_decoder"),
    ),
    coreml_capacity=256,
)
