"""CosyVoice3's LM on onnxruntime as the code decoder (``--backend code_decoder=onnx[-f32|-int8|-int4]``).

The Qwen2 stack (``llm.model.model.*`` of llm.pt) and the speech head ``llm_decoder`` as one
graph of the shared decoder-LM export (ttscli.backends.onnx), ``lm.onnx``, built from the
weights the loaded MLX LM holds; the prompt's embeddings (text, sos, task id, speech tokens)
and the sampler stay on MLX/numpy, so :meth:`CosyVoice3LM.generate` only swaps the forward.

Why: one decode step reads all the weights for a single position; onnxruntime's float32 GEMV
read them at about twice the bandwidth MLX's did on the project's CPU, and its prefill GEMMs
are faster too (docs/benchmarks.md#cv3-cpu-lm-onnx). ``onnx-f32`` is the default on a Linux CPU
(the same arithmetic as MLX's float32 up to summation order; checked against upstream's goldens);
int8 and int4 are opt-in (weights block-quantized: faster still, and no longer the goldens'
numbers).

Where the graphs live: built from a checkpoint, in ttscli's cache
(``paths.converted_dir(MODEL, "onnx-<precision>")``), found by the sha256 of llm.pt and rebuilt
when stale (``ttscli convert cosyvoice3 --to onnx`` builds them ahead); from random weights,
under a fingerprint of the weights.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from ttscli.backends.decoder import CODE_DECODER
from ttscli.backends.onnx.graph import Quant
from ttscli.errors import UsageError

FAMILY = "cosyvoice3"
FILE = "lm.onnx"
SOURCE_FILES = ("llm.pt",)
GRAPH_LAYOUT = 1
STACK = ("layers.", "norm.")


def max_positions(lm) -> int:
    """RoPE table length: the Qwen2 config's context (at most 32768)."""
    return min(int(lm.args.lm.max_position_embeddings or 32768), 32768)


def _weights(lm) -> tuple[dict, object]:
    from ttscli.backends.onnx.convert import mlx_params

    return mlx_params(lm.backbone, lambda k: k.startswith(STACK)), lm.llm_decoder.weight


def export_lm_graph(lm, out_dir: Path, quant: Quant, *, model_id: str, source_record: dict,
                    progress: Callable[..., None] | None = None) -> dict:
    """``lm.onnx`` (+ ``.data``) and the manifest into ``out_dir`` from the loaded LM's weights."""
    from ttscli.backends.coreml.weights import ArrayWeights, as_float32
    from ttscli.backends.onnx.export import export_components, export_lm

    def build(folder: Path) -> dict:
        stack, head = _weights(lm)
        src = ArrayWeights(stack, "MLX model")
        weights = {k: src.get(k) for k in src.keys()}
        return export_lm(lm.args.lm, weights, folder, FILE, heads={"logits": as_float32(head)},
                         max_positions=max_positions(lm), quant=quant)

    return export_components(out_dir, [(CODE_DECODER, "the Qwen2 LM (code decoder)", build)], model_id=model_id,
                             family=FAMILY, precision=quant.precision, source=source_record, layout=GRAPH_LAYOUT,
                             progress=progress)


def convert_onnx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                 q_group_size: int | None = 32, dtype: str | None = None,
                 progress: Callable[..., None] | None = None, **_) -> None:
    """``ttscli convert cosyvoice3 --to onnx [-q --q-bits 8|4]``: the LM graph of ``checkpoint``."""
    from ttscli.backends.onnx.convert import quant_for
    from ttscli.backends.onnx.export import checkpoint_record
    from ttscli.models.cosyvoice3.config import read_args
    from ttscli.models.cosyvoice3.load import load_llm

    if dtype not in (None, "float32"):
        raise UsageError("ONNX graphs compute in float32 (weights float32, int8 or int4); drop --dtype")
    lm = load_llm(Path(checkpoint), read_args(Path(checkpoint)), dtype="float32")
    export_lm_graph(lm, out_dir, quant_for(quantize, q_bits, q_group_size), model_id=spec.id,
                    source_record=checkpoint_record(checkpoint, SOURCE_FILES), progress=progress)


def find_or_build(lm, checkpoint: Path | None, quant: Quant, model_id: str | None = None) -> Path:
    """The LM graph of ``lm`` at this precision: by the hash of ``checkpoint``'s llm.pt (the
    file ``lm`` was loaded from), or, with ``checkpoint`` None, by its weights' fingerprint."""
    from ttscli.backends.onnx.convert import model_graphs

    def params():
        stack, head = _weights(lm)
        return {**stack, "llm_decoder.weight": head}

    return model_graphs(params, checkpoint, quant, model_id, family=FAMILY, layout=GRAPH_LAYOUT,
                        source_files=lambda ck: SOURCE_FILES, export=functools.partial(export_lm_graph, lm))


def check_options(options) -> None:
    """What the ONNX LM cannot honour, one line each, before anything loads."""
    if options.dtype not in (None, "float32"):
        raise UsageError(f"--dtype {options.dtype}: CosyVoice3's LM on onnxruntime computes in float32 (weights "
                         "float32, int8 or int4 by the backend name); drop --dtype or use --backend code_decoder=mlx")


def attach(lm, backend: str, checkpoint: Path | None, model_id: str | None = None) -> str:
    """Run ``lm``'s forward on onnxruntime from now on; returns the backend's full name
    (``onnx-float32`` etc.)."""
    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.onnx.decoder import OnnxCodeDecoder
    from ttscli.backends.onnx.manifest import component, read_manifest
    from ttscli.backends.onnx.runtime import OnnxLM
    from ttscli.backends.select import split_backend

    require_onnxruntime()
    quant = Quant(split_backend(backend)[1])
    folder = find_or_build(lm, None if checkpoint is None else Path(checkpoint), quant, model_id)
    lm.decoder = OnnxCodeDecoder(OnnxLM(folder, component(read_manifest(folder), CODE_DECODER, folder)), "logits")
    return f"onnx-{quant.precision}"
