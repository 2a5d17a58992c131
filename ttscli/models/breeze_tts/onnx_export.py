"""Breeze TTS 2 on onnxruntime: the whole per-frame LM work as two graphs of the shared
decoder-LM export (ttscli.backends.onnx).

    code_decoder    the backbone (``backbone_model.*``, Qwen3 blocks) and ``lm_head`` (codebook
                    0's classes plus the EOS class): what the Core ML package holds
    depth_decoder   ``depth_decoder.model.*`` (Llama blocks, llama3 RoPE) with its
                    ``inputs_embeds_projector`` in front and the 15 codebook heads of
                    ``depth_decoder.codebooks_head`` behind one ``logits`` output whose head the
                    int64 input ``head`` picks; a fresh 16-position stack per frame

The text encoder, the audio table, prompts, the sampler and the speech decoder stay with MLX.
Conversions live in ttscli's cache (``paths.converted_dir(MODEL, "onnx-<precision>")``), found
by the sha256 of config.json (the stacks' shapes, RoPE and eps are baked into the graphs), the
shard index and every shard; a missing or stale one is built on first use.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ttscli.backends.coreml.weights import take
from ttscli.backends.onnx.convert import RANDOM_SOURCE, build_from_params, convert_hook, mlx_params
from ttscli.backends.onnx.convert import find_or_build as shared_find_or_build
from ttscli.backends.onnx.export import checkpoint_record, export_components, export_lm, layout_is
from ttscli.backends.onnx.graph import Quant
from ttscli.config import read_json
from ttscli.errors import CheckpointError
from ttscli.lm.config import stack_shapes
from ttscli.models.breeze_tts.config import ModelArgs
from ttscli.models.breeze_tts.coreml_export import backbone_weights, weight_source

FAMILY = "breeze_tts"
CODE_DECODER, DEPTH_DECODER = "code_decoder", "depth_decoder"
BACKBONE_FILE, DEPTH_FILE = "backbone.onnx", "depth_decoder.onnx"
HEAD_INPUT = "head"
GRAPH_LAYOUT = 1
# RoPE table length of the backbone graph: a prompt of a few hundred positions plus ~20 minutes
# of frames at 12.5 Hz; the checkpoint's 40960 would only grow the table
BACKBONE_POSITIONS = 16384


def depth_weights(source, args: ModelArgs) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, None],
                                                    dict[str, np.ndarray]]:
    """(stack tensors, the input projection, heads ``logits_j [vocab, D]`` for codebooks 1..15)
    by the checkpoint's names. ``codebooks_head`` is stored input-major ``[15, D, vocab]``."""
    d = args.depth
    w = take(source, "depth_decoder.model.", stack_shapes(d))
    proj = take(source, "depth_decoder.model.",
                {"inputs_embeds_projector.weight": (d.hidden_size, args.audio_embed_size)})
    groups = args.num_codebooks - 1
    heads = take(source, "depth_decoder.", {"codebooks_head.weight": (groups, d.hidden_size, args.vocab_size)})
    hw = heads["codebooks_head.weight"]
    return (w, (proj["inputs_embeds_projector.weight"], None),
            {f"logits_{j}": np.ascontiguousarray(np.asarray(hw[j], np.float32).T) for j in range(groups)})


def export_graphs(source, args: ModelArgs, out_dir: Path, quant: Quant, *, model_id: str, source_record: dict,
                  progress: Callable[..., None] | None = None) -> dict:
    """Both graphs + manifest into ``out_dir`` from a weight source with the checkpoint's names."""
    def backbone(folder: Path) -> dict:
        lm, w, head = backbone_weights(source, args)
        return export_lm(lm, w, folder, BACKBONE_FILE, heads={"logits": head},
                         max_positions=min(BACKBONE_POSITIONS, args.max_positions), quant=quant)

    def depth(folder: Path) -> dict:
        w, proj, heads = depth_weights(source, args)
        return export_lm(args.depth, w, folder, DEPTH_FILE, heads=heads, max_positions=args.num_codebooks,
                         quant=quant, in_proj=proj, cache_block=args.num_codebooks, head_select=HEAD_INPUT)

    return export_components(out_dir, [(CODE_DECODER, "backbone", backbone), (DEPTH_DECODER, "depth decoder", depth)],
                             model_id=model_id, family=FAMILY, precision=quant.precision, source=source_record,
                             layout=GRAPH_LAYOUT, progress=progress)


def read_args(checkpoint: Path) -> ModelArgs:
    config = read_json(Path(checkpoint) / "config.json")
    if isinstance(config, dict) and config.get("quantization"):
        raise CheckpointError(f"{checkpoint} holds MLX-quantized weights; convert to ONNX from the original "
                              "checkpoint (ONNX quantizes with -q --q-bits 8|4)")
    return ModelArgs.from_dict(config, source=str(Path(checkpoint) / "config.json"))


def export_checkpoint(checkpoint: Path, out_dir: Path, quant: Quant, *, model_id: str,
                      progress: Callable[..., None] | None = None) -> dict:
    checkpoint = Path(checkpoint)
    args = read_args(checkpoint)
    source, files = weight_source(checkpoint)
    return export_graphs(source, args, out_dir, quant, model_id=model_id,
                         source_record=checkpoint_record(checkpoint, ("config.json", *files)), progress=progress)


convert_onnx = convert_hook(export_checkpoint)


def _current_layout(m: dict) -> bool:
    return layout_is(FAMILY, GRAPH_LAYOUT)(m) and DEPTH_DECODER in m.get("components", {})


def find_or_build(checkpoint: Path, quant: Quant, model_id: str | None = None) -> Path:
    """The folder converted from ``checkpoint`` at this precision (ttscli's cache searched by
    source hashes; built once when nothing matches)."""
    return shared_find_or_build(checkpoint, quant, export_checkpoint, model_id, accept=_current_layout)


def build_from_model(model, quant: Quant) -> Path:
    """The graphs of an in-memory MLX model (random weights at real dimensions for
    ``bench --random-weights``), cached by a fingerprint of its weights."""
    params = mlx_params(model, lambda k: k.startswith(
        ("backbone_model.layers", "backbone_model.norm", "lm_head", "depth_decoder.model.layers",
         "depth_decoder.model.norm", "depth_decoder.model.inputs_embeds_projector", "depth_decoder.codebooks_head")))
    return build_from_params(params, quant, GRAPH_LAYOUT,
                             lambda src, tmp: export_graphs(src, model.args, tmp, quant, model_id="random weights",
                                                            source_record=RANDOM_SOURCE))
