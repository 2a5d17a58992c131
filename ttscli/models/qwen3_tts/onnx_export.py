"""Qwen3-TTS on onnxruntime: the whole per-frame LM work (talker step + the code predictor's
15 steps) as two graphs of the shared decoder-LM export (ttscli.backends.onnx).

    code_decoder     the talker's Qwen3 stack (``talker.model.*``) and ``talker.codec_head``
    code_predictor   ``talker.code_predictor.model.*`` with its 15 heads behind one ``logits``
                     output (the int64 input ``head`` picks the step's head, the others are not
                     computed) and, when the talker is wider (1.7B), the
                     ``small_to_mtp_projection`` in front

Embeddings (prompt building, codec embeddings), sampling (the same MLX samplers and PRNG keys
as the MLX frame) and the speech decoder stay with MLX. Conversions live in ttscli's cache
(``paths.converted_dir(MODEL, "onnx-<precision>")``) and are found by the sha256 of the
checkpoint file they were built from; a missing or stale one is built on first use.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path

from ttscli.backends.coreml.weights import SafeTensors, take
from ttscli.backends.onnx.convert import RANDOM_SOURCE, build_from_params, convert_hook, mlx_params
from ttscli.backends.onnx.convert import find_or_build as shared_find_or_build
from ttscli.backends.onnx.export import checkpoint_record, export_components, export_lm
from ttscli.backends.onnx.graph import Quant
from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs, stack_shapes

_LOG = logging.getLogger(__name__)
FAMILY = "qwen3_tts"
CODE_DECODER, CODE_PREDICTOR = "code_decoder", "code_predictor"
TALKER_FILE, PREDICTOR_FILE = "talker.onnx", "code_predictor.onnx"
SOURCE_FILES = ("model.safetensors",)
HEAD_INPUT = "head"
# graphs built before the predictor's heads were chosen by an input ran all 15 heads every step:
# a conversion without it is rebuilt
GRAPH_LAYOUT = 2
TALKER_POSITIONS = 16384      # RoPE table length: a 4096-token prompt plus 8192 frames fit
PREFILL_ENV = "TTSCLI_ONNX_PREFILL"
# onnxruntime's prefill against an MLX batched prefill with the cache handed over: onnxruntime
# was faster at float32 and about even at int8 (docs/benchmarks.md#qwen3-cpu-backends-before).
# TTSCLI_ONNX_PREFILL=mlx picks the other.
DEFAULT_PREFILL = "onnx"


def lm_args(cfg: dict) -> tuple[LMArgs, LMArgs]:
    """(talker, code predictor) stacks of a config.json; both are Qwen3 blocks with q/k norm."""
    tc = cfg.get("talker_config")
    if not isinstance(tc, dict) or not isinstance(tc.get("code_predictor_config"), dict):
        raise CheckpointError("config.json has no talker_config.code_predictor_config; is this a Qwen3-TTS checkpoint?")
    return LMArgs.from_hf(tc, qk_norm=True), LMArgs.from_hf(tc["code_predictor_config"], qk_norm=True)


def export_graphs(source, cfg: dict, out_dir: Path, quant: Quant, *, model_id: str, source_record: dict,
                  progress: Callable[..., None] | None = None) -> dict:
    """Both graphs + manifest into ``out_dir`` from a weight source with the checkpoint's names."""
    talker, pred = lm_args(cfg)
    groups = int(cfg["talker_config"]["code_predictor_config"].get("num_code_groups", 16)) - 1

    def talker_graph(folder: Path) -> dict:
        w = take(source, "talker.model.", stack_shapes(talker))
        head = take(source, "talker.", {"codec_head.weight": (talker.vocab_size, talker.hidden_size)})
        return export_lm(talker, w, folder, TALKER_FILE, heads={"logits": head["codec_head.weight"]},
                         max_positions=min(TALKER_POSITIONS, talker.max_position_embeddings or TALKER_POSITIONS),
                         quant=quant)

    def predictor_graph(folder: Path) -> dict:
        p = "talker.code_predictor."
        w = take(source, p + "model.", stack_shapes(pred))
        heads = take(source, p, {f"lm_head.{j}.weight": (pred.vocab_size, pred.hidden_size) for j in range(groups)})
        proj = None
        if p + "small_to_mtp_projection.weight" in source:
            pw = take(source, p, {"small_to_mtp_projection.weight": (pred.hidden_size, talker.hidden_size),
                                  "small_to_mtp_projection.bias": (pred.hidden_size,)})
            proj = (pw["small_to_mtp_projection.weight"], pw["small_to_mtp_projection.bias"])
        elif pred.hidden_size != talker.hidden_size:
            raise CheckpointError(f"{source.path.name}: the code predictor is narrower than the talker but has no "
                                  "small_to_mtp_projection")
        return export_lm(pred, w, folder, PREDICTOR_FILE,
                         heads={f"logits_{j}": heads[f"lm_head.{j}.weight"] for j in range(groups)},
                         max_positions=groups + 1, quant=quant, in_proj=proj, cache_block=groups + 1,
                         head_select=HEAD_INPUT)

    return export_components(out_dir, [(CODE_DECODER, "talker", talker_graph),
                                       (CODE_PREDICTOR, "code predictor", predictor_graph)],
                             model_id=model_id, family=FAMILY, precision=quant.precision,
                             source={**source_record, "tts_model_type": cfg.get("tts_model_type"),
                                     "tts_model_size": cfg.get("tts_model_size")},
                             layout=GRAPH_LAYOUT, progress=progress)


def read_config(checkpoint: Path) -> dict:
    try:
        return json.loads((Path(checkpoint) / "config.json").read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{Path(checkpoint) / 'config.json'} is missing; point at a Qwen3-TTS checkpoint "
                              "folder") from None
    except ValueError as e:
        raise CheckpointError(f"{Path(checkpoint) / 'config.json'} is not valid JSON ({e})") from None


def export_checkpoint(checkpoint: Path, out_dir: Path, quant: Quant, *, model_id: str,
                      progress: Callable[..., None] | None = None) -> dict:
    checkpoint = Path(checkpoint)
    cfg = read_config(checkpoint)
    return export_graphs(SafeTensors(checkpoint / "model.safetensors"), cfg, out_dir, quant, model_id=model_id,
                         source_record=checkpoint_record(checkpoint, SOURCE_FILES), progress=progress)


convert_onnx = convert_hook(export_checkpoint)


def find_or_build(checkpoint: Path, quant: Quant, model_id: str | None = None) -> Path:
    """The folder converted from ``checkpoint`` at this precision (ttscli's cache searched by
    source hashes; built once when nothing matches)."""
    return shared_find_or_build(checkpoint, quant, export_checkpoint, model_id,
                                accept=lambda m: bool(m["components"][CODE_PREDICTOR].get("head_select")))


def build_from_model(model, quant: Quant) -> Path:
    """The graphs of an in-memory MLX model (random weights at real dimensions for
    ``bench --random-weights``), cached by a fingerprint of its weights."""
    params = mlx_params(model.talker, lambda k: k.startswith(
        ("model.layers", "model.norm", "codec_head", "code_predictor.model.layers", "code_predictor.model.norm",
         "code_predictor.lm_head", "code_predictor.small_to_mtp")), prefix="talker.")
    tc = json.loads(json.dumps(dataclasses.asdict(model.args.talker_config), default=str))
    return build_from_params(params, quant, GRAPH_LAYOUT,
                             lambda src, tmp: export_graphs(src, {"talker_config": tc}, tmp, quant,
                                                            model_id="random weights", source_record=RANDOM_SOURCE))
