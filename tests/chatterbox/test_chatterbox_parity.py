"""`ttscli parity chatterbox --golden`: the tiny upstream goldens in the documented format pass,
a perturbed golden fails, a file without Chatterbox keys is refused."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from ttscli.errors import UsageError
from ttscli.models.chatterbox.parity import parity_checks

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"


def test_goldens_pass():
    checks = parity_checks(None, FIX / "tiny", golden=FIX / "parity_t3.npz")
    assert len(checks) == 6 and all(c.passed for c in checks), [(c.name, c.value) for c in checks]


def test_perturbed_golden_fails(tmp_path):
    g = dict(np.load(FIX / "parity_t3.npz"))
    g["t3/prefill_logits"] = g["t3/prefill_logits"].copy()
    g["t3/prefill_logits"][0, :50] += 5.0
    g["t3/greedy_tokens"] = g["t3/greedy_tokens"].copy()
    g["t3/greedy_tokens"][7] += 1
    np.savez(tmp_path / "bad.npz", **g)
    res = {c.name: c for c in parity_checks(None, FIX / "tiny", golden=tmp_path / "bad.npz", frames=20)}
    assert not res["CFG prefill logits vs golden (cosine, worst row)"].passed
    greedy = res["greedy speech tokens vs golden (leading equal)"]
    assert not greedy.passed and greedy.value == 7


def test_foreign_file_is_refused(tmp_path):
    np.savez(tmp_path / "x.npz", other=np.zeros(2))
    with pytest.raises(UsageError, match="none of the Chatterbox golden keys"):
        parity_checks(None, FIX / "tiny", golden=tmp_path / "x.npz")
    with pytest.raises(UsageError, match="needs --golden"):
        parity_checks(None, FIX / "tiny")
