"""Core ML backend: a stateful decoder-LM export any family's LM can use, and its runtime.

    runtime.py   where Core ML runs (macOS 15+), loading a package, checked stateful predict;
                 require_converted, a loader's check before anything loads
    lm.py        MIL program of a Qwen3 / Llama decoder stack, one position per call, KV cache as state
    weights.py   numpy weight sources (safetensors incl. bf16, in-memory arrays, random) + strict take
    export.py    MIL program -> .mlpackage (fp16 or int8 linear weights) -> manifest component entry
    convert.py   a family's code decoder: stack + head tensors -> package + manifest; convert hook checks
    manifest.py  manifest.json per converted model: the only record of which packages exist
    decoder.py   CoreMLCodeDecoder: new_cache / prefill / step over a converted LM package;
                 CoreMLStack: a package without a head, every fed position's hidden state

A family converts by choosing its LM's ``LMArgs`` and tensors (``convert.lm_with_head``) and
calling ``convert.export_code_decoder``; its pipeline opens the code decoder with
``decoder.open_code_decoder(checkpoint)``. lm.py and export.py import coremltools; the rest
does not, so `ttscli models` and the runtime checks stay light.
"""
from .runtime import COMPUTE_UNITS, CoreMLModel, coreml_available, load_package, require_converted, require_coreml

__all__ = ["COMPUTE_UNITS", "CoreMLModel", "coreml_available", "load_package", "require_converted",
           "require_coreml"]
