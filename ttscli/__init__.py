"""ttscli: open neural text-to-speech on-device with MLX and Core ML.

    import ttscli
    pipe = ttscli.load("piper-joe")
    for chunk in ttscli.synthesize(pipe, ttscli.Request("Hello there.")):
        ...  # float32 mono at pipe.sample_rate
    for chunk in ttscli.synthesize_words(pipe, ttscli.Request("Hello there.")):
        ...  # chunk.audio, and chunk.words: (start, end, word) in seconds
    for chunk in ttscli.synthesize_stream(pipe, llm_tokens(), ttscli.Request("")):
        ...  # each sentence spoken as soon as its text is complete (ttscli.stream_input)

``load``, ``synthesize`` and ``Request`` are imported on first use, and the BLAS that mlx calls
is loaded at the first import of mlx: ``ttscli --help`` imports neither numpy nor the model
code, and the embedded voice on onnxruntime never imports mlx.
"""
from ttscli import signals as _signals

# first, before the imports below: a Ctrl-C there must not print a traceback (CLI only)
_signals.install_for_import()

from ttscli import _blas  # noqa: E402

_blas.preload_before_mlx()  # the BLAS is loaded when, and only if, something imports mlx

__version__ = "0.1.0"

__all__ = ["load", "synthesize", "synthesize_words", "synthesize_stream", "synthesize_stream_words", "Request",
           "__version__"]

_LAZY = {"load": "ttscli.api", "synthesize": "ttscli.generate", "synthesize_words": "ttscli.generate",
         "synthesize_stream": "ttscli.stream_input", "synthesize_stream_words": "ttscli.stream_input",
         "Request": "ttscli.generate"}


def __getattr__(name: str):
    """The public API, imported when first asked for (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'ttscli' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
