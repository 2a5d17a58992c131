"""Piper's uses of ttscli.nn.conv against their definitions (direct NumPy loops on the ONNX layouts):
the padded conv layer in every form the model calls, the stage's shared-input GEMM, and the
halo-interior transposed conv of interior.py against the zero-padded one."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ttscli.models.piper import interior
from ttscli.models.piper.conv import Conv1d
from ttscli.nn.conv import ConvTranspose1d, gemm_weight_cf, shared_input_convs_cf


def direct_conv(x, w, b, d, p):
    """x [T, in], ONNX weight [out, in, k], symmetric zero padding p."""
    k = w.shape[2]
    xp = np.pad(x, [(p, p), (0, 0)])
    t_out = x.shape[0] + 2 * p - d * (k - 1)
    return np.stack([sum(w[:, :, i] @ xp[s + i * d] for i in range(k)) for s in range(t_out)]) + b


def f32(a):
    return mx.array(np.asarray(a, np.float32))


@pytest.mark.parametrize("cin,cout,k,d,t", [(5, 7, 3, 1, 9), (4, 4, 7, 12, 100), (6, 2, 5, 6, 40), (3, 1, 7, 1, 20)])
@pytest.mark.parametrize("form", ["__call__", "accumulate", "cf"])
def test_piper_conv_forms(cin, cout, k, d, t, form):
    r = np.random.default_rng(k * d)
    x, w, b = r.standard_normal((t, cin)), r.standard_normal((cout, cin, k)), r.standard_normal(cout)
    c = Conv1d(cin, cout, k, d)
    c.weight, c.bias = f32(w), f32(b)
    want = direct_conv(x, w, b, d, d * (k - 1) // 2)
    if form == "__call__":
        got = np.array(c(f32(x[None])))[0]
    elif form == "accumulate":
        got = np.array(c.accumulate(f32(x)))
    else:
        got = np.array(c.cf(f32(x.T))).T
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_shared_input_convs_equal_separate():
    r = np.random.default_rng(1)
    convs = []
    for k, d in [(3, 1), (5, 2), (7, 3)]:
        c = Conv1d(4, 4, k, d)
        c.weight, c.bias = f32(r.standard_normal((4, 4, k))), f32(r.standard_normal(4))
        convs.append(c)
    x = f32(r.standard_normal((4, 50)))                                      # channels-first
    wcat = mx.concatenate([gemm_weight_cf(c.weight) for c in convs], axis=0)
    for ours, c in zip(shared_input_convs_cf(x, convs, wcat, residual=x), convs):
        np.testing.assert_allclose(np.array(ours), np.array(c(x.T[None], residual=x.T[None])[0].T), atol=1e-4)


@pytest.mark.parametrize("cin,cout,k,s,t", [(16, 8, 16, 8, 11), (8, 4, 8, 4, 7), (6, 4, 4, 2, 9)])
def test_interior_upsample_equals_padded(cin, cout, k, s, t):
    """The halo-interior transposed conv (no edge padding) is the zero-padded output's interior."""
    r = np.random.default_rng(k + s)
    up = ConvTranspose1d(cin, cout, k, s, (k - s) // 2)
    up.weight, up.bias = f32(r.standard_normal((cin, cout, k))), f32(r.standard_normal(cout))
    v = f32(r.standard_normal((cin, t)))
    full = np.array(up.cf(v))
    x, xl, first = interior.upsample(up, v, 0.1)
    x = np.array(x)
    np.testing.assert_allclose(x, full[:, first: first + x.shape[1]], atol=1e-4)
    np.testing.assert_allclose(np.array(xl), np.maximum(x, 0.1 * x), atol=1e-6)
