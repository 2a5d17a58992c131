"""T3 on onnxruntime as Chatterbox's code decoder (``--code-decoder-backend onnx[-f32|-int8|-int4]``).

Classifier-free guidance's two rows (same length: only the text embeddings differ) run as one
batch of two, each row its own slice of the KV buffers: one run of two rows takes well under
the time of two one-row runs (docs/benchmarks.md#cb-onnx-cfg), since a decode step reads the
weights once either way. The prefill
runs on onnxruntime too; T3's embeddings and its sampler stay on MLX, so a step hands MLX
arrays in and gets MLX logits back.
"""
from __future__ import annotations

from pathlib import Path

from ttscli.backends.onnx.decoder import OnnxCodeDecoder
from ttscli.backends.onnx.runtime import OnnxLM
from ttscli.errors import UsageError


class T3OnnxDecoder(OnnxCodeDecoder):
    def __init__(self, lm: OnnxLM, precision: str):
        super().__init__(lm, "logits")
        self.precision = precision


def open_decoder(folder: Path) -> T3OnnxDecoder:
    """The T3 graph converted into ``folder``."""
    from ttscli.backends.decoder import CODE_DECODER
    from ttscli.backends.onnx.manifest import component, read_manifest

    m = read_manifest(folder)
    return T3OnnxDecoder(OnnxLM(folder, component(m, CODE_DECODER, folder)), m.get("precision", "?"))


def check_options(options) -> None:
    """What the ONNX T3 cannot honour, as one line each (before anything loads)."""
    if options.dtype not in (None, "float32"):
        raise UsageError(f"--dtype {options.dtype}: Chatterbox's T3 on onnxruntime computes in float32 "
                         "(weights float32, int8 or int4 by the backend name); drop --dtype or use mlx")
    if options.prefill_mode != "batched":
        raise UsageError(f"--prefill-mode {options.prefill_mode}: the ONNX code decoder prefills the prompt in "
                         "one run; use batched, or --code-decoder-backend mlx")


def load_decoder(backend: str, t3, checkpoint: Path | None, options, model_id: str | None = None) -> T3OnnxDecoder:
    """``onnx`` (int8) or ``onnx-f32|int8|int4``: the conversion of ``checkpoint`` in ttscli's
    cache (built on first use) or, for random weights, of the in-memory T3."""
    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.graph import Quant
    from ttscli.backends.select import split_backend
    from ttscli.models.chatterbox.onnx_export import build_from_model, find_or_build

    check_options(options)
    require_onnxruntime()
    quant = Quant(split_backend(backend)[1])
    folder = build_from_model(t3, quant) if checkpoint is None else find_or_build(checkpoint, quant, model_id)
    return open_decoder(folder)
