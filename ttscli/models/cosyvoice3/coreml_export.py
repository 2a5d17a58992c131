"""CosyVoice3 on Core ML: the LM's Qwen2 stack and speech head as the code decoder.

Only the stack (``llm.model.model.*`` of llm.pt: q/k/v with their biases, RoPE at theta 1e6) and
the speech head ``llm_decoder`` go into the package, built by the shared stateful LM export
(ttscli.backends.coreml); the prompt's embeddings (text, sos, task id, speech tokens) and the
sampler stay with MLX, so :meth:`CosyVoice3LM.generate` only swaps its forward. One row per
call: CosyVoice3's LM has no classifier-free guidance, so no rowwise wrapper is needed.

The tensors are read through the MLX loader (the one path that unpickles llm.pt without
executing code and names the tensors as Hugging Face does), then handed over in float32.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ttscli.backends.coreml.convert import convert_code_decoder, export_code_decoder, lm_with_head
from ttscli.backends.coreml.manifest import source_files
from ttscli.backends.coreml.weights import ArrayWeights

__all__ = ["convert_coreml", "export_coreml", "lm_weights"]

FAMILY = "cosyvoice3"
LM_FILE = "lm.mlpackage"
SOURCE_FILES = ("llm.pt",)
STACK = ("layers.", "norm.")
HEAD = "llm_decoder.weight"
# KV positions of one text chunk: the prompt (about 120 ids of both texts and the system line, a
# 10 s reference's 250 speech tokens) and upstream's own bound on the speech, 20 tokens per text
# token (a 200-character chunk is about 80 text tokens): 2048 holds them; the fp16 cache of the
# 0.5B LM's 24 layers x 2 KV heads x 64 is then 25 MB
CAPACITY = 2048


def lm_weights(lm):
    """(args, stack tensors, head) of a loaded :class:`~ttscli.models.cosyvoice3.llm.CosyVoice3LM`."""
    from ttscli.backends.onnx.convert import mlx_params

    arrays = {**mlx_params(lm.backbone, lambda k: k.startswith(STACK)), HEAD: lm.llm_decoder.weight}
    return lm_with_head(ArrayWeights(arrays, "MLX model"), lm.args.lm, "", HEAD, int(lm.llm_decoder.weight.shape[0]))


def export_coreml(checkpoint: Path, out_dir: Path, *, model_id: str, capacity: int = CAPACITY,
                  weights_8bit: bool = False, precision: str = "float16") -> dict:
    """``lm.mlpackage`` and the manifest naming it (with llm.pt's hash) into ``out_dir``."""
    from ttscli.models.cosyvoice3.config import read_args
    from ttscli.models.cosyvoice3.load import load_llm

    checkpoint = Path(checkpoint)
    lm = load_llm(checkpoint, read_args(checkpoint), dtype="float32")
    record = {"checkpoint": str(checkpoint.resolve()), "files": source_files(checkpoint, SOURCE_FILES)}
    return export_code_decoder(lm_weights(lm), out_dir, LM_FILE, model_id=model_id, family=FAMILY, source=record,
                               capacity=capacity, weights_8bit=weights_8bit, precision=precision)


def convert_coreml(spec, checkpoint: Path, out_dir: Path, *, capacity: int = CAPACITY, quantize: bool = False,
                   q_bits: int = 8, q_group_size: int | None = None, weights_8bit: bool = False,
                   dtype: str | None = None, progress: Callable[..., None] | None = None, **_unused) -> None:
    """``ttscli convert cosyvoice3 --to coreml`` (``capacity``: :data:`CAPACITY`)."""
    convert_code_decoder(export_coreml, spec, checkpoint, out_dir, "the Qwen2 LM", capacity=capacity,
                         quantize=quantize, q_bits=q_bits, weights_8bit=weights_8bit, dtype=dtype, progress=progress)
