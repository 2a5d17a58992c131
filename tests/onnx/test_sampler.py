"""The numpy sampler of the onnxruntime frame loop draws exactly what ttscli.lm.sample draws on
MLX from the same keys: greedy, temperature, top-k, top-p, min-p and their mixes, over many
random rows and keys, with the NaN and all-filtered guards."""
import numpy as np
import pytest

import ttscli  # noqa: F401  (BLAS preload before mlx)
from ttscli.backends.onnx.sample import noise, sample_row
from ttscli.lm.sample import SamplingParams, sample

PARAMS = [SamplingParams(do_sample=False), SamplingParams(0.9, 50, 1.0), SamplingParams(1.0, 0, 1.0),
          SamplingParams(0.7, 0, 0.8), SamplingParams(1.3, 0, 1.0, 0.1), SamplingParams(0.9, 20, 0.9, 0.02),
          SamplingParams(0.5, 1, 1.0), SamplingParams(2.0, 2047, 0.95)]


def mlx_draws(logits, p, keys):
    import mlx.core as mx

    return [int(sample(mx.array(logits[j:j + 1]), p, keys[j]).item()) for j in range(len(logits))]


@pytest.mark.parametrize("p", PARAMS, ids=lambda p: f"t{p.temperature}-k{p.top_k}-p{p.top_p}-m{p.min_p}-{p.do_sample}")
def test_same_codes_as_mlx(p):
    import mlx.core as mx

    rng = np.random.default_rng(int(p.temperature * 100) + p.top_k)
    n, V = 120, 2048
    scale = rng.choice([0.3, 1.0, 3.0, 10.0], size=(n, 1))
    logits = (rng.standard_normal((n, V)) * scale).astype(np.float32)
    keys = mx.random.split(mx.random.key(int(rng.integers(1 << 30))), n)
    rows = noise(keys, V)
    ours = [sample_row(logits[j], p, rows[j]) for j in range(n)]
    assert ours == mlx_draws(logits, p, keys)
    if not p.greedy and p.top_k != 1:
        assert len(set(ours)) > n // 4      # really drawn, not the argmax


def test_guards_nan_and_all_filtered():
    import mlx.core as mx

    V = 64
    rows = np.random.default_rng(1).standard_normal((4, V)).astype(np.float32)
    rows[0, :10] = np.nan                    # NaN counts as -inf
    rows[1] = -np.inf                        # nothing finite: the argmax fallback
    rows[2, 5] = np.inf                      # one id at +inf
    rows[3] = np.nan
    keys = mx.random.split(mx.random.key(3), 4)
    nz = noise(keys, V)
    for p in (SamplingParams(0.9, 50, 1.0), SamplingParams(1.0, 0, 0.5, 0.1), SamplingParams(do_sample=False)):
        assert [sample_row(rows[j], p, nz[j]) for j in range(4)] == mlx_draws(rows, p, keys)


def test_noise_of_many_keys_is_each_keys_own():
    """The vmapped call makes, row by row, what one key alone makes (the shape a row's draw uses)."""
    import mlx.core as mx

    keys = mx.random.split(mx.random.key(11), 15)
    alone = [mx.random.gumbel((1, 300), key=keys[j]) for j in range(15)]
    np.testing.assert_array_equal(noise(keys, 300), np.stack([np.asarray(a).reshape(-1) for a in alone]))
