"""The cosyvoice3 family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook, sampling_knobs


def _voices(spec, checkpoint):
    # no preset speakers in the published checkpoint: a clone or a saved voice file
    return []


FAMILY = Family(
    name="cosyvoice3",
    load=hook("ttscli.models.cosyvoice3.load:load_pipeline"),
    knobs=(
        # cloning without the transcript is upstream's cross-lingual mode: the reference voices
        # the flow (x-vector, prompt mel), its tokens stay out of the LM
        Knob("x_vector_only", bool, "Cross-lingual cloning: the reference's voice only, no transcript or "
             "reference tokens in the LM (upstream's inference_cross_lingual).", False, commands=("clone",)),
        *sampling_knobs(defaults={"top_k": 25, "top_p": 0.8, "do_sample": True}, names=("top_k", "top_p", "do_sample")),
    ),
    voices=_voices,
    convert={"onnx": hook("ttscli.models.cosyvoice3.onnx_lm:convert_onnx"),
             "coreml": hook("ttscli.models.cosyvoice3.coreml_export:convert_coreml")},
    bench_components=hook("ttscli.models.cosyvoice3.bench:bench_components"),
    bench_rows=(("lm_prefill_s", "LM prefill (s)", "{:.3f}"),
                ("lm_tokens_per_s", "LM tokens/s", "{:.1f}"),
                ("flow_onnx", "DiT flow on onnxruntime (1: yes, 0: MLX)", "{:.0f}"),
                ("flow_s", "DiT flow (s)", "{:.3f}"),
                ("hift_s", "causal HiFT (s)", "{:.3f}"),
                ("token2wav_s_per_audio_s", "flow + HiFT s per audio s", "{:.3f}")),
    peers={"pytorch": hook("ttscli.models.cosyvoice3.bench:bench_peer")},
    batches=True,
    bench_batch=hook("ttscli.models.cosyvoice3.bench:bench_batch"),
    parity_checks=hook("ttscli.models.cosyvoice3.parity:parity_checks"),
    honours=frozenset({"voice", "instruct", "speed", "ref_audio", "save_voice", "max_frames", "stream"}),
    # the first streamed audio needs one 25-token hop (plus what pads the reference to whole
    # hops) and 3 tokens of the flow's lookahead (upstream CosyVoice3Model.tts)
    first_chunk_frames=28,
    first_audio="the first 25-token hop (plus the reference's padding to whole hops) and 3 tokens of lookahead",
    coreml_capacity=2048,     # one chunk's prompt and upstream's bound on its speech (coreml_export.CAPACITY)
    components=(
        # the Qwen2 LM's float32 graph ran 1.9x MLX's tokens/s and prefill on a Linux CPU
        # (docs/benchmarks.md#cv3-cpu-lm-onnx); int8 / int4 stay opt-in (no longer the goldens' numbers)
        Component("code_decoder", ("mlx", "coreml", "onnx"), onnx_precision=True, measured={("linux", ""): "onnx-f32"},
                  on_gpu="mlx", why="onnxruntime's float32 graph ran the LM faster than MLX on a Linux CPU"),
        # the DiT, called 10 times per utterance on CFG's two rows, ran faster on onnxruntime's
        # GEMMs than on MLX on a Linux CPU (docs/benchmarks.md#cv3-cpu-dit-onnx)
        Component("flow_estimator", ("mlx", "onnx"), onnx_precision=True, measured={("linux", ""): "onnx-f32"},
                  on_gpu="mlx",
                  why="onnxruntime ran the DiT flow faster than MLX on a Linux CPU"),
    ),
)
