"""The pocket_tts family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook, sampling_knobs

FAMILY = Family(
    name="pocket_tts",
    load=hook("ttscli.models.pocket_tts.load:load_pipeline"),
    knobs=(
        *sampling_knobs(defaults={"temperature": 0.3}, names=("temperature",)),
        Knob("sampler_decode_steps", int, "Flow-head (LSD) integration steps per frame.", default=1, min=1, max=64),
        Knob("noise_clamp", float, "Truncate the flow head's noise to [-v, v] (default: no truncation).",
             min=1e-6, max=100.0),
        Knob("eos_threshold", float, "End the utterance once the EOS logit exceeds this (higher: longer).",
             default=-4.0, min=-100.0, max=100.0),
        Knob("frames_after_eos", int, "Frames generated after EOS (default: 5 for up to four words, else 3).",
             min=0, max=100),
    ),
    voices=hook("ttscli.models.pocket_tts.load:voice_names"),
    bench_components=hook("ttscli.models.pocket_tts.bench:bench_components"),
    bench_rows=(("lm_step_ms", "flow LM step, median (ms)", "{:.2f}"),
                ("flow_head_ms", "flow head, median (ms)", "{:.2f}"),
                ("mimi_frame_ms", "Mimi decode per frame, median (ms)", "{:.2f}")),
    peers={"pocket-tts": hook("ttscli.models.pocket_tts.bench:bench_peer")},
    parity_checks=hook("ttscli.models.pocket_tts.parity:parity_checks"),
    parity_against=("onnx", "onnx-f32", "onnx-int8", "onnx-int4"),
    convert={"onnx": hook("ttscli.models.pocket_tts.onnx_export:convert_onnx"),
             "coreml": hook("ttscli.models.pocket_tts.coreml_export:convert_coreml")},
    coreml_capacity=1024,
    # continuous batching: requests as rows of one flow-LM forward per frame (rows.py)
    batches=True,
    bench_batch=hook("ttscli.models.pocket_tts.rows:bench_batch"),
    # a clone is the reference's audio alone (its voice prompt); a transcript is never read
    ref_text_optional=True,
    honours=frozenset({"voice", "ref_audio", "save_voice", "max_frames", "stream"}),
    # the Mimi decoder is causal and streams exactly from one frame: first audio after frame 1
    first_chunk_frames=1,
    components=(
        # the int8 graph ran a frame's LM step and flow head faster than MLX on the AMD CPU it was
        # measured on, whichever ran first in the bench; unmeasured CPUs keep MLX
        Component("flow_lm", ("mlx", "onnx"), onnx_precision=True, measured={("linux", "AuthenticAMD"): "onnx"},
                  on_gpu="mlx", why="onnxruntime int8 ran the flow LM faster than MLX on this CPU; "
                  "its graphs are built into the cache on first use"),
        Component("speech_decoder", ("mlx",)),
    ),
)
