import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


def ttscli_exe() -> list[str]:
    """The installed console script, as a user runs it."""
    exe = Path(sys.executable).with_name("ttscli")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ttscli")
    assert found, "the ttscli console script is not installed (pip install -e .)"
    return [found]


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


def only_line(err: str) -> str:
    lines = [l for l in err.strip().splitlines() if l.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert "Traceback" not in err
    return lines[0]


def no_files(folder: Path):
    """Nothing but the cache/config folders the harness creates."""
    left = [p.name for p in folder.iterdir() if p.name not in ("cache", "config")]
    assert not left, f"left behind: {left}"
