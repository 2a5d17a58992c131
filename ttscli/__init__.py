"""ttscli: open neural text-to-speech on-device with MLX and Core ML.

    import ttscli
    pipe = ttscli.load("piper-joe")
    for chunk in ttscli.synthesize(pipe, ttscli.Request("Hello there.")):
        ...  # float32 mono at pipe.sample_rate
"""
from ttscli import signals as _signals

# first, before the ~0.5 s of imports below: a Ctrl-C there must not print a traceback (CLI only)
_signals.install_for_import()

from ttscli import _blas  # noqa: E402

_blas.preload()  # must run before anything imports mlx

__version__ = "0.1.0"

from ttscli.api import load  # noqa: E402
from ttscli.generate import Request, synthesize  # noqa: E402

__all__ = ["load", "synthesize", "Request", "__version__"]
