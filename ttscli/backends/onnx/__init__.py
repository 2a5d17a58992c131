"""onnxruntime backend (CPU): a decoder-LM step graph any family's codec LM can use, and its runtime.

    graph.py     ONNX graph of a Qwen3 / Llama stack: fused projections, GroupQueryAttention on a
                 shared past/present KV buffer, float32 or int8/int4 MatMulNBits linear layers
    export.py    graph -> .onnx + external weights -> manifest component entry
    manifest.py  manifest.json per converted model: which graphs exist, built from which files
    runtime.py   availability, the one global thread pool, a session with its KV buffers bound
                 through IOBinding (numpy memory, never copied per step)
    decoder.py   OnnxCodeDecoder: new_cache / prefill / step, the code-decoder protocol

A family converts by choosing its LM's ``LMArgs`` and tensors (``export.export_lm``) and writing
the manifest. Only graph.py/export.py import ``onnx`` and only runtime.py imports
``onnxruntime``, inside functions, so light commands never load them.
"""
from .runtime import onnx_available, require_onnxruntime

PRECISIONS = ("float32", "int8", "int4")
DEFAULT_PRECISION = "int8"       # on CPU: ~2x float32 speed at logits cosine >= 0.999 (docs/parity.md)

__all__ = ["DEFAULT_PRECISION", "PRECISIONS", "onnx_available", "require_onnxruntime"]
