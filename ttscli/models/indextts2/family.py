"""The indextts2 family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook, sampling_knobs


def _voices(spec, checkpoint):
    # no preset speakers: a clone, or a voice saved with --save-voice
    return []


FAMILY = Family(
    name="indextts2",
    load=hook("ttscli.models.indextts2.load:load_pipeline"),
    knobs=(
        Knob("emotion", str, "Emotion as weights over happy, angry, sad, afraid, disgusted, melancholic, surprised, "
             "calm: NAME=WEIGHT pairs (happy=0.8,calm=0.2) or 8 numbers; each in [0, 1.2]."),
        Knob("emotion_ref", str, "A recording (up to 15 s) whose emotion is spoken in the cloned voice.",
             local_file=True),
        Knob("emotion_alpha", float, "Strength of --emotion-ref or --emotion (upstream's emo_alpha).",
             default=1.0, min=0.0, max=1.0),
        Knob("emotion_from_text", bool, "Take the emotion from the text being spoken, through upstream's Qwen "
             "emotion classifier (--instruct gives another text to read it from).", default=False),
        Knob("emotion_random", bool, "Borrow each emotion from a random one of the recorded speakers instead of "
             "the one closest to the voice (upstream's use_random; seeded by --seed).", default=False),
        Knob("tokens", int, "Force the semantic codes of the (single-segment) text to N, about 50 a second "
             "(ttscli's forced length; upstream's release has no duration mode).", min=1, max=1500),
        Knob("duration", float, "Force the speech of the (single-segment) text to about this many seconds "
             "(as --tokens, rounded to whole codes).", min=0.05, max=30.0),
        Knob("quick_first_segment", int, "End the first segment after about N text pieces, so the first "
             "streamed audio comes sooner (upstream's quick_streaming_tokens; 0: off).", default=0, min=0,
             max=120),
        Knob("segment_tokens", int, "Most text pieces in one segment, one GPT + flow + vocoder pass each "
             "(upstream's max_text_tokens_per_segment).", default=120, min=2, max=600),
        Knob("num_beams", int, "Beams of the GPT's beam sampling (1: plain sampling, faster).", default=3, min=1,
             max=8),
        Knob("inference_timesteps", int, "Euler steps of S2Mel's flow matching; fewer is faster, coarser.",
             default=25, min=1, max=100),
        Knob("cfg_rate", float, "Classifier-free guidance of S2Mel's flow on the content and voice "
             "(0: none, one row instead of two).", default=0.7, min=0.0, max=10.0),
        *sampling_knobs(defaults={"temperature": 0.8, "top_k": 30, "top_p": 0.8, "repetition_penalty": 10.0,
                                  "do_sample": True},
                        names=("temperature", "top_k", "top_p", "repetition_penalty", "do_sample")),
    ),
    voices=_voices,
    bench_components=hook("ttscli.models.indextts2.bench:bench_components"),
    bench_rows=(("gpt_s", "GPT codes (s)", "{:.3f}"),
                ("gpt_codes_per_s", "GPT codes/s", "{:.1f}"),
                ("s2mel_s", "S2Mel flow (s)", "{:.3f}"),
                ("vocoder_s", "BigVGAN (s)", "{:.3f}")),
    peers={"pytorch": hook("ttscli.models.indextts2.bench:bench_peer")},
    batches=True,
    bench_batch=hook("ttscli.batching:bench_rows"),
    parity_checks=hook("ttscli.models.indextts2.parity:parity_checks"),
    honours=frozenset({"voice", "instruct", "ref_audio", "save_voice", "max_frames", "stream"}),
    ref_text_optional=True,
    first_audio="the first text segment's codes, flow and vocoder (upstream streams a segment at a time; "
                "--quick-first-segment shortens the first)",
    convert={"onnx": hook("ttscli.models.indextts2.onnx_gpt:convert_onnx"),
             "coreml": hook("ttscli.models.indextts2.coreml_export:convert_coreml")},
    coreml_capacity=2048,     # one segment's conditioning, text and upstream's 1500 codes (coreml_export.CAPACITY)
    components=(
        # a decode step of the 24-layer GPT-2 for three beam rows: onnxruntime's float32 graph ran it
        # about three times faster than MLX on a Linux CPU (docs/benchmarks.md#indextts2-cpu-onnx);
        # int8 / int4 stay opt-in (no longer the goldens' numbers)
        Component("code_decoder", ("mlx", "coreml", "onnx"), onnx_precision=True, measured={("linux", ""): "onnx-f32"},
                  on_gpu="mlx", why="onnxruntime's float32 graph ran the GPT faster than MLX on a Linux CPU"),
        Component("flow_estimator", ("mlx", "onnx"), onnx_precision=True, measured={("linux", ""): "onnx-f32"},
                  on_gpu="mlx", why="onnxruntime ran S2Mel's DiT faster than MLX on a Linux CPU"),
    ),
)
