"""Which BLAS serves mlx's calls (ttscli/_blas.py), checked in fresh interpreters."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the BLAS preload is Linux-only")

PROBE = "import ttscli, ttscli._blas as b, mlx.core as mx; print(b.name()); print(b.set_num_threads(1))"


def probe(blas: str | None) -> list[str]:
    env = dict(os.environ)
    env.pop("TTSCLI_BLAS", None)
    if blas is not None:
        env["TTSCLI_BLAS"] = blas
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.split("\n")[:2]


def test_none_keeps_mlx_builtin():
    assert probe("none") == ["mlx builtin", "None"]


def test_default_prefers_mkl_when_its_wheel_is_installed():
    from ttscli import _blas

    name, prev = probe(None)
    if _blas.mkl_library():
        assert name.startswith("mkl ") and "libmkl_rt" in name
        assert int(prev) >= 1                       # MKL_Get_Max_Threads answered
    else:
        assert name.startswith("openblas ") or name == "mlx builtin"


def test_openblas_on_request():
    from ttscli import _blas

    if not any(os.path.exists(p) for p in _blas.OPENBLAS):
        pytest.skip("no system OpenBLAS on this machine")
    name, prev = probe("openblas")
    assert name.startswith("openblas ") and int(prev) >= 1


def test_a_missing_library_path_falls_back_to_mlx_builtin():
    assert probe("/nonexistent/libblas.so")[0] == "mlx builtin"
