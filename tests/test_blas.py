"""Which BLAS serves mlx's calls (ttscli/_blas.py), checked in fresh interpreters."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the BLAS preload is Linux-only")

PROBE = "import ttscli, ttscli._blas as b, mlx.core as mx; print(b.name()); print(b.set_num_threads(1))"


def run_probe(blas: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TTSCLI_BLAS", None)
    if blas is not None:
        env["TTSCLI_BLAS"] = blas
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p


def probe(blas: str | None) -> list[str]:
    return run_probe(blas).stdout.split("\n")[:2]


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


def test_a_missing_library_path_falls_back_to_mlx_builtin_with_one_warning():
    p = run_probe("/nonexistent/libblas.so")
    assert p.stdout.split("\n")[0] == "mlx builtin"
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "TTSCLI_BLAS=/nonexistent/libblas.so" in lines[0] and "no such file" in lines[0]


def test_a_file_that_is_not_a_library_is_named_in_the_warning(tmp_path):
    bogus = tmp_path / "libnot.so"
    bogus.write_text("not an ELF file")
    p = run_probe(str(bogus))
    assert p.stdout.split("\n")[0] == "mlx builtin"
    assert str(bogus) in p.stderr and p.stderr.count("\n") == 1


def test_the_default_choice_is_silent():
    assert run_probe(None).stderr == ""
    assert run_probe("none").stderr == ""


def test_mlx_imported_before_ttscli_is_named_once():
    """mlx binds its BLAS at import: imported first, it keeps its reference BLAS, and ttscli says so
    (one warning), except where the reference BLAS is what TTSCLI_BLAS asks for."""
    from ttscli import _blas

    if not (_blas.mkl_library() or any(os.path.exists(p) for p in _blas.OPENBLAS)):
        pytest.skip("no BLAS to preload on this machine")
    code = "import mlx.core, ttscli, ttscli.lm; from ttscli import _blas; print(_blas.name())"
    for blas, warned in ((None, True), ("none", False)):
        env = {k: v for k, v in os.environ.items() if k != "TTSCLI_BLAS"}
        if blas:
            env["TTSCLI_BLAS"] = blas
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and p.stdout.strip() == "mlx builtin", p.stderr
        assert p.stderr.count("import ttscli before mlx") == (1 if warned else 0), p.stderr


def test_one_thread_blocks_share_one_count_and_restore_the_threads():
    code = ("import threading, ttscli, ttscli._blas as b, mlx.core\n"
            "b.set_num_threads(2); before = b.num_threads()\n"
            "inside, left = threading.Event(), threading.Event()\n"
            "def other():\n"
            "    with b.one_thread():\n"
            "        inside.set(); left.wait(30)\n"
            "t = threading.Thread(target=other); t.start(); inside.wait(30)\n"
            "with b.one_thread():\n"
            "    pass\n"
            "still = b.num_threads(); left.set(); t.join(30)\n"
            "print(before, still, b.num_threads())")
    env = {k: v for k, v in os.environ.items() if k != "TTSCLI_BLAS"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    before, still, after = p.stdout.split()
    if before == "None":
        pytest.skip("no BLAS that reports its threads on this machine")
    # the other thread's block was still open when ours closed: one thread until it closed too
    assert (before, still, after) == ("2", "1", "2")
