"""Helpers for tests that run the installed `ttscli` (imported by name; conftest.py files clash)."""
import shutil
import sys
from pathlib import Path


def ttscli_exe() -> list[str]:
    """The installed console script, as a user runs it."""
    exe = Path(sys.executable).with_name("ttscli")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ttscli")
    assert found, "the ttscli console script is not installed (pip install -e .)"
    return [found]


def only_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert "Traceback" not in err
    return lines[0]


def no_files(folder: Path):
    """Nothing but the cache/config folders the harness creates."""
    left = [p.name for p in folder.iterdir() if p.name not in ("cache", "config")]
    assert not left, f"left behind: {left}"


def by_name(checks) -> dict:
    """A ``ttscli parity --json`` report's checks keyed by their names."""
    return {c["name"]: c for c in checks}
