"""The GEMM forms of conv1d / conv_transpose1d against their definitions (direct NumPy loops)."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ttscli.models.piper.conv import Conv1d, conv_transpose1d_gemm, gemm_weight_cf, shared_input_convs_cf


def direct_conv(x, w, b, d, p):
    t, _ = x.shape
    cout, k, _ = w.shape
    xp = np.pad(x, [(p, p), (0, 0)])
    t_out = t + 2 * p - d * (k - 1)
    return np.stack([sum(w[:, i] @ xp[s + i * d] for i in range(k)) for s in range(t_out)]) + b


@pytest.mark.parametrize("cin,cout,k,d,t", [(5, 7, 3, 1, 9), (4, 4, 7, 12, 100), (6, 2, 5, 6, 40), (3, 1, 7, 1, 20)])
def test_dilated_conv(cin, cout, k, d, t):
    r = np.random.default_rng(k * d)
    x, w, b = r.standard_normal((t, cin)), r.standard_normal((cout, k, cin)), r.standard_normal(cout)
    c = Conv1d(cin, cout, k, d)
    c.weight, c.bias = mx.array(w, dtype=mx.float32), mx.array(b, dtype=mx.float32)
    res = r.standard_normal((t, cout))
    ours = np.array(c(mx.array(x[None], dtype=mx.float32), residual=mx.array(res[None], dtype=mx.float32)))[0]
    np.testing.assert_allclose(ours, direct_conv(x, w, b, d, c.padding) + res, atol=1e-4)


@pytest.mark.parametrize("cin,cout,k,d,t,bias", [(5, 7, 3, 1, 9, True), (4, 4, 7, 12, 100, True),
                                                  (6, 2, 5, 6, 40, False), (3, 1, 1, 1, 20, True)])
def test_accumulated_conv(cin, cout, k, d, t, bias):
    r = np.random.default_rng(k * d + 1)
    x, w, b = r.standard_normal((t, cin)), r.standard_normal((cout, k, cin)), r.standard_normal(cout)
    c = Conv1d(cin, cout, k, d, bias=bias)
    c.weight = mx.array(w, dtype=mx.float32)
    if bias:
        c.bias = mx.array(b, dtype=mx.float32)
    ours = np.array(c.accumulate(mx.array(x, dtype=mx.float32)))
    np.testing.assert_allclose(ours, direct_conv(x, w, b if bias else 0.0, d, c.padding), atol=1e-4)


def test_shared_input_convs_equal_separate():
    r = np.random.default_rng(1)
    convs = []
    for k, d in [(3, 1), (5, 2), (7, 3)]:
        c = Conv1d(4, 4, k, d)
        c.weight = mx.array(r.standard_normal((4, k, 4)), dtype=mx.float32)
        c.bias = mx.array(r.standard_normal(4), dtype=mx.float32)
        convs.append(c)
    x = mx.array(r.standard_normal((4, 50)), dtype=mx.float32)                # channels-first
    wcat = mx.concatenate([gemm_weight_cf(c.weight) for c in convs], axis=0)
    for ours, c in zip(shared_input_convs_cf(x, convs, wcat, residual=x), convs):
        np.testing.assert_allclose(np.array(ours), np.array(c(x.T[None], residual=x.T[None])[0].T), atol=1e-4)


@pytest.mark.parametrize("cin,cout,k,s,p,t", [(16, 8, 16, 8, 4, 11), (8, 4, 8, 4, 2, 7), (6, 5, 7, 3, 2, 9),
                                              (4, 3, 5, 5, 0, 6), (4, 3, 12, 4, 4, 5)])
def test_transposed_conv(cin, cout, k, s, p, t):
    r = np.random.default_rng(k + s)
    x, w, b = r.standard_normal((t, cin)), r.standard_normal((cout, k, cin)), r.standard_normal(cout)
    full = np.zeros(((t - 1) * s + k, cout))
    for i in range(t):
        for j in range(k):
            full[i * s + j] += w[:, j] @ x[i]
    ours = np.array(conv_transpose1d_gemm(mx.array(x[None], dtype=mx.float32), mx.array(w, dtype=mx.float32),
                                          mx.array(b, dtype=mx.float32), s, p))[0]
    np.testing.assert_allclose(ours, full[p: (t - 1) * s + k - p] + b, atol=1e-4)
