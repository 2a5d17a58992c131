"""Parity with the published graph under onnxruntime (its float twin and the int8 graph itself),
and that each check fails when a weight of the stage it watches is perturbed."""
import numpy as np
import pytest

# ttscli before mlx: importing it loads a fast BLAS
from ttscli.models.kokoro import parity

mx = pytest.importorskip("mlx.core")

pytest.importorskip("onnxruntime")


def _failing(model, refs):
    return {c.name for c in parity.compare(model, refs) if not c.passed}


@pytest.mark.slow
def test_all_checks_pass(kokoro_model, refs):
    checks = parity.compare(kokoro_model, refs)
    assert len(checks) == 13
    bad = [(c.name, c.value, c.threshold) for c in checks if not c.passed]
    assert not bad
    by = {c.name: c.value for c in checks}
    assert by["float twin: decoder on its durations + STFT features (rel L2)"] < 1e-4
    assert by["float twin: F0 (rel L2)"] < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("name, change, must_fail", [
    ("predictor.duration_proj.linear_layer.bias", lambda w: w + 3.0,
     {"float twin: durations equal (tokens)", "int8 graph: largest duration difference (frames)",
      "int8 graph: share of tokens whose duration differs", "int8 graph: total duration difference (share)"}),
    ("predictor.F0_proj.bias", lambda w: w + 3.0, {"float twin: F0 (rel L2)", "int8 graph: F0 (rel L2)"}),
    ("predictor.N_proj.bias", lambda w: w + 1.0, {"float twin: N (rel L2)", "int8 graph: N (rel L2)"}),
    ("decoder.generator.m_source.l_linear.weight", lambda w: w * 1.02, {"float twin: harmonic source (rel L2)"}),
    ("decoder.generator.conv_post.weight", lambda w: w * 1.002,
     {"float twin: decoder on its durations + STFT features (rel L2)"}),
])
def test_a_perturbed_weight_fails_its_check(kokoro_model, refs, name, change, must_fail):
    from mlx.utils import tree_flatten

    old = dict(tree_flatten(kokoro_model.parameters()))[name]
    kokoro_model.load_weights([(name, change(old))], strict=False)
    try:
        failing = _failing(kokoro_model, refs)
    finally:
        kokoro_model.load_weights([(name, old)], strict=False)
        mx.eval(kokoro_model.parameters())
    assert must_fail <= failing, failing


def test_log_mel_distance_sees_a_changed_signal():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(24000).astype(np.float32) * 0.1
    assert parity.log_mel_l1(x, x) == 0.0
    assert parity.log_mel_l1(x * 2, x) == pytest.approx(np.log(2), rel=0.05)
