"""`ttscli parity kokoro-82m --golden` on the golden hexgrad's KModel (kokoro 0.9.4) made from the
default checkpoint's weights in the published .pth layout (scripts/goldens/kokoro_upstream.py):
every stage passes, and a perturbed weight or recorded input fails the check that watches it."""
from pathlib import Path

import numpy as np
import pytest

# ttscli before mlx: importing it loads a fast BLAS
from ttscli.models.kokoro import parity

mx = pytest.importorskip("mlx.core")

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "kokoro" / "en1_kmodel.npz"
DECODER = "decoder on the golden's durations + STFT features vs golden audio (rel L2)"


def _failing(model, golden=GOLDEN):
    return {c.name for c in parity.golden_checks(model, golden) if not c.passed}


def test_kmodel_golden_passes(kokoro_model):
    checks = {c.name: c for c in parity.golden_checks(kokoro_model, GOLDEN)}
    assert set(checks) == {"durations equal golden (tokens)", "F0 vs golden (rel L2)", "N vs golden (rel L2)",
                           DECODER, "audio vs golden (log-mel L1)"}
    assert all(c.passed for c in checks.values()), [(c.name, c.value) for c in checks.values()]
    assert checks[DECODER].value < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name, change, must_fail", [
    ("predictor.N_proj.bias", lambda w: w + 1.0, {"N vs golden (rel L2)"}),
    ("predictor.F0_proj.bias", lambda w: w + 3.0, {"F0 vs golden (rel L2)", DECODER}),
    ("decoder.generator.conv_post.weight", lambda w: w * 1.002, {DECODER}),
])
def test_a_perturbed_weight_fails_its_check(kokoro_model, name, change, must_fail):
    from mlx.utils import tree_flatten

    old = dict(tree_flatten(kokoro_model.parameters()))[name]
    kokoro_model.load_weights([(name, change(old))], strict=False)
    try:
        failing = _failing(kokoro_model)
    finally:
        kokoro_model.load_weights([(name, old)], strict=False)
        mx.eval(kokoro_model.parameters())
    assert must_fail <= failing, failing


@pytest.mark.slow
def test_the_recorded_source_features_matter(kokoro_model, tmp_path):
    g = dict(np.load(GOLDEN))
    feats = g["har_features"].copy()
    feats[11:] = np.roll(feats[11:], 1, axis=1)          # the phases one STFT frame late
    np.savez(tmp_path / "moved.npz", **{**g, "har_features": feats})
    assert DECODER in _failing(kokoro_model, tmp_path / "moved.npz")
