"""`ttscli parity chatterbox --golden`: the tiny upstream goldens in the documented format pass
(T3, the voice encoder and every S3Gen stage), a perturbed golden or recorded draw fails the check
that watches it, a file without Chatterbox keys is refused."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from ttscli.errors import UsageError
from ttscli.models.chatterbox.parity import parity_checks

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"


def test_goldens_pass():
    checks = parity_checks(None, FIX / "tiny", golden=FIX / "parity_t3.npz")
    assert len(checks) == 14 and all(c.passed for c in checks), [(c.name, c.value) for c in checks]
    names = {c.name for c in checks}
    assert {"S3Gen flow mel vs golden, recorded noise (max abs)", "S3 tokenizer tokens vs golden (equal)",
            "CAMPPlus x-vector vs golden (max abs)"} <= names


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


def _s3gen_only(tmp_path, **changes):
    g = {k: v for k, v in np.load(FIX / "parity_t3.npz").items() if k.startswith("s3gen/")}
    for key, change in changes.items():
        g[key.replace("__", "/")] = change(g[key.replace("__", "/")].copy())
    np.savez(tmp_path / "s3gen.npz", **g)
    return {c.name: c for c in parity_checks(None, FIX / "tiny", golden=tmp_path / "s3gen.npz")}


def test_s3gen_goldens_alone_run_only_the_s3gen_checks(tmp_path):
    res = _s3gen_only(tmp_path)
    assert len(res) == 8 and all(c.passed for c in res.values())
    assert all(n.startswith(("S3Gen", "S3 tokenizer", "reference prompt", "CAMPPlus")) for n in res)


def _bump(x, at=3, by=0.5):
    x.reshape(-1)[at] += by
    return x


SOURCE = "S3Gen HiFT harmonic source vs golden, recorded draws (max abs)"
WAVE = "S3Gen HiFT waveform vs golden, recorded draws (max abs)"
MEL = "S3Gen flow mel vs golden, recorded noise (max abs)"


@pytest.mark.slow
@pytest.mark.parametrize("key, change, must_fail", [
    ("s3gen__flow__mel", _bump, {MEL}),
    ("s3gen__flow__noise", lambda x: x[:, ::-1], {MEL}),
    ("s3gen__hift__f0", lambda x: x * 1.01, {"S3Gen HiFT F0 vs golden, recorded draws (max abs / peak)"}),
    ("s3gen__hift__phase", lambda x: x + 0.3, {SOURCE, WAVE}),
    ("s3gen__hift__sine_noise", lambda x: x[:, ::-1], {SOURCE, WAVE}),
    ("s3gen__hift__wav", lambda x: _bump(x, 500, 0.01), {WAVE}),
    ("s3gen__tokenizer__tokens", lambda x: _bump(x, 5, 1), {"S3 tokenizer tokens vs golden (equal)"}),
    ("s3gen__ref__embedding", lambda x: _bump(x, 0, 1e-3), {"CAMPPlus x-vector vs golden (max abs)"}),
])
def test_a_perturbed_s3gen_golden_fails_its_check(tmp_path, key, change, must_fail):
    res = _s3gen_only(tmp_path, **{key: change})
    assert {n for n, c in res.items() if not c.passed} == must_fail


def test_foreign_file_is_refused(tmp_path):
    np.savez(tmp_path / "x.npz", other=np.zeros(2))
    with pytest.raises(UsageError, match="none of the Chatterbox golden keys"):
        parity_checks(None, FIX / "tiny", golden=tmp_path / "x.npz")
    with pytest.raises(UsageError, match="needs --golden"):
        parity_checks(None, FIX / "tiny")
