"""The voxcpm2 family's declaration (light: heavy imports happen inside the hooks)."""
from __future__ import annotations

from ttscli.models.base import Component, Family, Knob, hook

FAMILY = Family(
    name="voxcpm2",
    load=hook("ttscli.models.voxcpm2.load:load_pipeline"),
    knobs=(
        # upstream's defaults and its CLI's ranges (voxcpm/cli.py validate_ranges)
        Knob("inference_timesteps", int, "Diffusion (Euler) steps per latent patch; fewer is faster, coarser.",
             default=10, min=1, max=100),
        Knob("cfg_value", float, "Classifier-free guidance of each patch on the text and voice (upstream "
             "recommends 1.0-3.0).", default=2.0, min=0.1, max=10.0),
        Knob("min_len", int, "Patches drawn before the stop head is heeded (upstream's min_len); one at or "
             "above the patch limit runs to the limit, which is an error.", default=2, min=0, max=4096),
        Knob("ref_prefix", bool, "With --ref-text, also put the recording in front as the isolated reference "
             "(upstream's ultimate cloning); off: continuation from the recording only.", default=True,
             commands=("clone",)),
    ),
    convert={"onnx": hook("ttscli.models.voxcpm2.onnx_lm:convert_onnx"),
             "coreml": hook("ttscli.models.voxcpm2.coreml_export:convert_coreml")},
    bench_components=hook("ttscli.models.voxcpm2.bench:bench_components"),
    bench_rows=(("lm_step_ms", "LM + residual LM step, median (ms)", "{:.2f}"),
                ("dit_patch_ms", "diffusion head per patch, median (ms)", "{:.2f}"),
                ("vae_patch_ms", "AudioVAE decode per patch, median (ms)", "{:.2f}")),
    peers={"voxcpm": hook("ttscli.models.voxcpm2.bench:bench_peer")},
    parity_checks=hook("ttscli.models.voxcpm2.parity:parity_checks"),
    # continuous batching: requests as rows of one forward of both LMs per patch (rows.py)
    batches=True,
    bench_batch=hook("ttscli.models.voxcpm2.rows:bench_batch"),
    honours=frozenset({"voice", "instruct", "ref_audio", "save_voice", "max_frames", "stream"}),
    # the AudioVAE decoder is causal and streams exactly from one patch (160 ms): upstream yields each
    ref_text_optional=True,
    first_chunk_frames=1,
    coreml_capacity=2048,     # one chunk's prompt and upstream's bound on its patches (coreml_export.CAPACITY)
    components=(
        Component("lm", ("mlx", "coreml", "onnx"), onnx_precision=True,
                  why="the base and residual LMs as onnxruntime graphs built from the loaded weights, or as "
                      "Core ML packages converted ahead (macOS 15+)"),
        # the LocDiT, called nine times a patch on CFG's two rows, ran faster on onnxruntime's
        # GEMMs than on MLX on a Linux CPU (docs/benchmarks.md#voxcpm2-cpu-dit-onnx)
        Component("flow_estimator", ("mlx", "onnx"), onnx_precision=True, measured={("linux", ""): "onnx-f32"},
                  on_gpu="mlx",
                  why="onnxruntime ran the diffusion transformer faster than MLX on a Linux CPU"),
        # LocEnc, run on each generated patch: the float32 graph took a fraction of MLX's time on
        # a Linux CPU (docs/benchmarks.md#voxcpm2-cpu-locenc-onnx)
        Component("patch_encoder", ("mlx", "onnx"), measured={("linux", ""): "onnx"}, on_gpu="mlx",
                  why="onnxruntime ran the patch encoder faster than MLX on a Linux CPU"),
        Component("speech_decoder", ("mlx",)),
    ),
)
