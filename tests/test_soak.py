"""A long-running process stays bounded: RSS over many syntheses of varied text (issue 15 item 10)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_piper_rss_levels_off_over_varied_texts(tmp_path):
    # every text a different length: before compiled graphs were bounded, each new length kept
    # its traces (~1.3 MiB per synthesis); MLX's buffer cache is already bounded by ttscli.load
    # the MLX model: its compiled graphs are what could grow
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "piper", "--n", "60", "--max-words", "16",
                        "--backend", "vits=mlx"], capture_output=True, text=True, timeout=3600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rss = {int(n): float(v) for n, v in re.findall(r"after\s+(\d+): RSS\s+([\d.]+) MiB", p.stdout)}
    assert rss[60] <= rss[10] * 1.10, p.stdout
