"""The CPU fast paths against float64 math and against MLX's own fused attention kernel."""
from __future__ import annotations

import numpy as np
import pytest

import ttscli  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx

from ttscli.nn.fastmath import estrin, fast_exp, fast_sigmoid, fast_tanh, gelu_tanh, horner, softmax, swiglu
from ttscli.nn.layers import attention


def test_fast_exp_matches_float64_and_flushes_to_zero():
    x = np.concatenate([np.linspace(-86.9, 88.0, 200001), [-1e-7, 0.0, 1e-7]]).astype(np.float32)
    got = np.array(fast_exp(mx.array(x)))
    want = np.exp(x.astype(np.float64))
    assert np.max(np.abs(got - want) / want) < 2e-7
    low = np.array(fast_exp(mx.array(np.array([-87.5, -200.0, -np.inf], np.float32))))
    assert (low == 0).all()
    assert np.array(fast_exp(mx.array(np.array([-50.0], np.float32)), zero_below=-40.0))[0] == 0


def test_tanh_sigmoid_swiglu():
    x = np.linspace(-30, 30, 100001).astype(np.float32)
    x64 = x.astype(np.float64)
    assert np.max(np.abs(np.array(fast_tanh(mx.array(x))) - np.tanh(x64))) < 5e-7
    # scaled form (the WaveNet gate's sigmoid - 1/2 = tanh(x/2)/2)
    half = np.array(fast_tanh(mx.array(x), 0.5, 0.5))
    assert np.max(np.abs(half - 0.5 * np.tanh(0.5 * x64))) < 3e-7
    sig = 1 / (1 + np.exp(-x64))
    assert np.max(np.abs(np.array(fast_sigmoid(mx.array(x))) - sig)) < 2e-7
    u = np.random.default_rng(0).standard_normal(x.shape).astype(np.float32)
    got = np.array(swiglu(mx.array(x), mx.array(u)))
    assert np.max(np.abs(got - x64 * sig * u) / (np.abs(x64 * sig * u) + 1e-30)) < 1e-6


def test_gelu_tanh_matches_the_float64_formula():
    x = np.linspace(-30, 30, 100001).astype(np.float32)
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    got = np.array(gelu_tanh(mx.array(x)))
    assert np.max(np.abs(got - want) / np.maximum(1.0, np.abs(x64))) < 1e-6


@pytest.mark.parametrize("n", range(1, 9))
def test_estrin_equals_horner(n):
    coefs = tuple(np.random.default_rng(n).standard_normal(n))
    v = np.linspace(-2, 2, 101)
    assert np.allclose(estrin(coefs, v, v * v, v ** 4), horner(coefs, v), rtol=1e-12, atol=1e-12)


def test_softmax_with_masked_entries_has_no_denormals():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((4, 7, 300)) * 30).astype(np.float32)
    w[..., ::3] = -np.inf
    got = np.array(softmax(mx.array(w)))
    w64 = w.astype(np.float64)
    e = np.exp(w64 - w64.max(-1, keepdims=True))
    assert np.max(np.abs(got - e / e.sum(-1, keepdims=True))) < 1e-6
    assert (got[..., ::3] == 0).all()
    tiny = got[(got != 0)]
    assert tiny.min() >= np.finfo(np.float32).tiny        # zero or normal, never denormal


@pytest.mark.parametrize("heads,kv_heads,L,S", [(16, 8, 37, 37), (4, 4, 5, 29), (6, 2, 12, 12)])
@pytest.mark.parametrize("kind", ["causal", "bool", "additive", "none"])
def test_attention_equals_mlx_fused_kernel(heads, kv_heads, L, S, kind):
    rng = np.random.default_rng(heads * 100 + S)
    q = mx.array(rng.standard_normal((1, heads, L, 16)).astype(np.float32))
    k = mx.array(rng.standard_normal((1, kv_heads, S, 16)).astype(np.float32))
    v = mx.array(rng.standard_normal((1, kv_heads, S, 16)).astype(np.float32))
    i = np.arange(S - L, S)[:, None]
    j = np.arange(S)[None, :]
    visible = (j <= i) & (j > i - 9)                      # a sliding window, as the speech decoder uses
    mask = {"causal": "causal", "bool": mx.array(visible),
            "additive": mx.array(np.where(visible, 0.0, -np.inf).astype(np.float32)), "none": None}[kind]
    ours = np.array(attention(q, k, v, 0.25, mask))
    ref = np.array(mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask))
    assert np.max(np.abs(ours - ref)) < 2e-5
