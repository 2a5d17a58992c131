import os
import subprocess
from pathlib import Path

import pytest

import ttscli  # noqa: F401  (first: a test module that imports mlx before ttscli would keep mlx's slow BLAS)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


from clitools import ttscli_exe


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """``cuda``-marked tests need MLX's CUDA backend as the default device; elsewhere they skip
    before their fixtures load anything."""
    if item.get_closest_marker("cuda"):
        from ttscli.lm import cuda_kernels

        if not cuda_kernels.available():
            pytest.skip("needs MLX's CUDA backend as the default device (an NVIDIA GPU with mlx[cuda12] or "
                        "mlx[cuda13])")


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One converted-weights cache for the whole session (conversion runs once)."""
    return tmp_path_factory.mktemp("ttscli-cache")


@pytest.fixture
def run_cli(tmp_path, shared_cache):
    """Run `ttscli ARGS` in a subprocess; returns CompletedProcess with bytes stdout, str stderr."""

    def run(*args, input=None, env=None, cwd=None, timeout=300):
        e = dict(os.environ)
        e.setdefault("HF_HUB_OFFLINE", "1")
        e["TTSCLI_CACHE"] = str(shared_cache)
        e["TTSCLI_CONFIG_DIR"] = str(tmp_path / "config")
        e["COLUMNS"] = "200"
        if env:
            e.update(env)
        p = subprocess.run(ttscli_exe() + [str(a) for a in args], input=input, capture_output=True,
                           env=e, cwd=cwd or tmp_path, timeout=timeout)
        p.err = p.stderr.decode("utf-8", "replace")
        return p

    return run


