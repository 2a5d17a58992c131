"""The BLAS choice (ttscli/_blas.py): TTSCLI_BLAS, then a measurement kept for this CPU, then
the choice measured for the CPU vendor; checked in fresh interpreters."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the BLAS preload is Linux-only")

PROBE = "import ttscli, ttscli._blas as b, mlx.core; print(b.name().split()[0]); print(b.why)"  # loaded with mlx


def probe(tmp_path, blas=None):
    env = {k: v for k, v in os.environ.items() if k != "TTSCLI_BLAS"}
    env["TTSCLI_CACHE"] = str(tmp_path)
    if blas:
        env["TTSCLI_BLAS"] = blas
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    assert p.returncode == 0, p.stderr
    return p.stdout.split("\n")[:2]


def have_both():
    from ttscli import _blas

    return _blas.mkl_library() and any(os.path.exists(p) for p in _blas.OPENBLAS)


def test_vendor_choice_then_measurement_then_env(tmp_path):
    from ttscli import _blas

    if not have_both():
        pytest.skip("needs both the mkl wheel and a system OpenBLAS")
    vendor = _blas.cpu_id()[0]
    name, why = probe(tmp_path)
    if vendor in _blas.MEASURED:
        assert name == _blas.MEASURED[vendor] and why == f"measured for {vendor}"
    record = {"cpu": list(_blas.cpu_id()), "cpus": os.cpu_count(), "seconds": {}, "choice": "openblas"}
    (tmp_path / "blas.json").write_text(json.dumps(record))
    assert probe(tmp_path) == ["openblas", "measured on this CPU"]
    assert probe(tmp_path, "mkl") == ["mkl", "TTSCLI_BLAS"]
    # a measurement from another CPU is not used
    (tmp_path / "blas.json").write_text(json.dumps({**record, "cpu": ["OtherVendor", "Other CPU"]}))
    assert probe(tmp_path)[1] != "measured on this CPU"
    (tmp_path / "blas.json").write_text(json.dumps({**record, "choice": "none"}))
    assert probe(tmp_path) == ["mlx", "measured on this CPU"]
