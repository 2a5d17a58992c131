"""Cold start: `ttscli --help` imports none of the numeric libraries, a `ttscli speak` with the
embedded voice on onnxruntime imports neither mlx nor onnx, and `ttscli bench --cold` times
both sides (ttscli and piper-tts) as whole processes."""
import json
import os
import subprocess
import sys

import pytest

from ttscli import bench
from ttscli.errors import UsageError
from ttscli.registry import load_registry

HEAVY = ("numpy", "mlx", "mlx.core", "onnxruntime", "onnx", "soundfile", "ml_dtypes")

DRIVER = """
import json, sys
from ttscli.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "heavy": sorted(m for m in %r if m in sys.modules)}), file=sys.stderr)
""" % (HEAVY,)


def imported(args, tmp_path):
    """Run the CLI with ``args`` in a fresh interpreter; (exit code, the heavy modules it imported)."""
    env = {"TTSCLI_CACHE": str(tmp_path / "cache"), "TTSCLI_CONFIG_DIR": str(tmp_path / "config")}
    p = subprocess.run([sys.executable, "-c", DRIVER, *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, **env}, cwd=tmp_path)
    got = json.loads(p.stderr.strip().splitlines()[-1])
    return got["rc"], set(got["heavy"])


def test_help_imports_no_numeric_library(tmp_path):
    assert imported(["--help"], tmp_path) == (0, set())


def test_speak_with_the_embedded_voice_imports_neither_mlx_nor_onnx(tmp_path):
    pytest.importorskip("onnxruntime")
    args = ["speak", "Hello.", "--backend", "vits=onnx", "-o", str(tmp_path / "out.wav")]
    imported(args, tmp_path)                     # the first run keeps the seeded graph in the cache
    rc, heavy = imported(args, tmp_path)
    assert rc == 0 and (tmp_path / "out.wav").stat().st_size > 44
    assert "onnxruntime" in heavy
    assert not heavy & {"mlx", "mlx.core", "onnx", "ml_dtypes"}


def test_cold_refuses_a_model_piper_cannot_run():
    with pytest.raises(UsageError, match="--cold compares with piper-tts, which runs Piper voices; "
                                         "qwen3-tts-0.6b-base is a qwen3_tts model"):
        bench.run_cold(bench.ColdRequest(model="qwen3-tts-0.6b-base"), load_registry())


def test_bench_cold_times_ttscli_and_piper(run_cli):
    pytest.importorskip("piper")
    p = run_cli("bench", "--cold", "-n", "2", "--warmup", "0", "--json", "-q", timeout=600)
    assert p.returncode == 0, p.err
    report = json.loads(p.stdout)
    assert report["model"] == "piper-joe" and report["runs"] == 2
    assert set(report["sides"]) == set(bench.COLD_SIDES)
    for side in report["sides"].values():
        assert len(side["wall_s"]) == len(side["cpu_s"]) == 2
        assert all(w > 0 for w in side["wall_s"]) and all(c > 0 for c in side["cpu_s"])
        assert side["min_s"] <= side["median_s"] <= side["max_s"]
    assert " speak Hello. -m piper-joe -o " in report["commands"]["ttscli speak"]
    piper = report["commands"]["piper"].split()
    assert piper[1] == "-m" and piper[2].endswith(".onnx")
    assert report["speak_vs_piper"]["wall"] > 0 and report["speak_vs_piper"]["cpu"] > 0


def test_the_blas_loads_at_the_first_import_of_mlx_and_not_before():
    from ttscli import _blas

    if not sys.platform.startswith("linux") or not (_blas.mkl_library() or any(map(os.path.exists, _blas.OPENBLAS))):
        pytest.skip("needs Linux with MKL or OpenBLAS installed")
    pytest.importorskip("mlx.core")
    probe = ("import ttscli; from ttscli import _blas; print(_blas.loaded is None); "
             "import mlx.core; print(_blas.loaded is not None)")
    env = {**os.environ, "TTSCLI_BLAS": "mkl" if _blas.mkl_library() else "openblas"}
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert p.stdout.split() == ["True", "True"], p.stderr
