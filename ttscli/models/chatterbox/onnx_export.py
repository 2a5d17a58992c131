"""Chatterbox on onnxruntime: T3's Llama stack and speech head as the code decoder.

Exactly what the Core ML package holds (:func:`~ttscli.models.chatterbox.coreml_export.t3_weights`:
``tfmr.*`` and ``speech_head``), built by the shared decoder-LM export (ttscli.backends.onnx)
as one graph, ``t3.onnx``. T3's embeddings, learned position tables, conditioning encoder and
sampler and S3Gen stay on MLX. Classifier-free guidance's two rows run as a batch of two
(onnx_decoder.py).

Conversions live in ttscli's cache (``paths.converted_dir(MODEL, "onnx-<precision>")``), found
by the sha256 of t3_cfg.safetensors; a missing or stale one is built on first use.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ttscli.backends.coreml.weights import SafeTensors
from ttscli.backends.decoder import CODE_DECODER
from ttscli.backends.onnx.convert import RANDOM_SOURCE, build_from_params, convert_hook, mlx_params
from ttscli.backends.onnx.convert import find_or_build as shared_find_or_build
from ttscli.backends.onnx.export import checkpoint_record, export_components, export_lm, layout_is
from ttscli.backends.onnx.graph import Quant
from ttscli.models.chatterbox.config import T3Args
from ttscli.models.chatterbox.coreml_export import t3_weights

FAMILY = "chatterbox"
T3_FILE = "t3.onnx"
SOURCE_FILES = ("t3_cfg.safetensors",)
GRAPH_LAYOUT = 1


def max_positions(args: T3Args) -> int:
    """RoPE table length: the longest sequence T3's learned position tables allow (conditioning,
    framed text, two BOS, every speech token)."""
    cond = 1 + args.perceiver_queries + 1
    return cond + args.max_text_tokens + 2 + 2 + args.max_speech_tokens + 2


def export_t3(source, args: T3Args, out_dir: Path, quant: Quant, *, model_id: str, source_record: dict,
              progress: Callable[..., None] | None = None) -> dict:
    """``t3.onnx`` + manifest into ``out_dir`` from a weight source with the checkpoint's names."""
    def t3(folder: Path) -> dict:
        lm, w, head = t3_weights(source, args)
        return export_lm(lm, w, folder, T3_FILE, heads={"logits": head}, max_positions=max_positions(args),
                         quant=quant)

    return export_components(out_dir, [(CODE_DECODER, "T3 (code decoder)", t3)], model_id=model_id, family=FAMILY,
                             precision=quant.precision, source=source_record, layout=GRAPH_LAYOUT, progress=progress)


def export_checkpoint(checkpoint: Path, out_dir: Path, quant: Quant, *, model_id: str,
                      progress: Callable[..., None] | None = None) -> dict:
    from ttscli.checkpoint import read_safetensors, shapes

    checkpoint = Path(checkpoint)
    path = checkpoint / SOURCE_FILES[0]
    args = T3Args.from_weights(shapes(read_safetensors(path)), str(path))
    return export_t3(SafeTensors(path), args, out_dir, quant, model_id=model_id,
                     source_record=checkpoint_record(checkpoint, SOURCE_FILES), progress=progress)


convert_onnx = convert_hook(export_checkpoint)


def find_or_build(checkpoint: Path, quant: Quant, model_id: str | None = None) -> Path:
    """The folder converted from ``checkpoint`` at this precision (ttscli's cache, by source
    hashes; built once when missing or stale)."""
    return shared_find_or_build(checkpoint, quant, export_checkpoint, model_id, accept=layout_is(FAMILY, GRAPH_LAYOUT))


def build_from_model(t3, quant: Quant) -> Path:
    """The graph of an in-memory T3 (random weights at the real size for ``bench
    --random-weights``), cached by a fingerprint of its weights."""
    params = mlx_params(t3, lambda k: k.startswith(("tfmr.layers.", "tfmr.norm.", "speech_head.")))
    return build_from_params(params, quant, f"{FAMILY}/{GRAPH_LAYOUT}", lambda src, tmp: export_t3(
        src, t3.args, tmp, quant, model_id="random weights", source_record=RANDOM_SOURCE))
