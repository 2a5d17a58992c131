"""ttscli.nn.conv against direct float64 NumPy convolutions written from PyTorch's definitions:
Conv1d ``y[t] = b + sum_j W[:, :, j] @ x_pad[t*s + j*d]`` and ConvTranspose1d
``full[t*s + j] += x[t] @ W[:, :, j]``, cropped by ``padding`` on each side, so the output length is
``(T-1)*s - 2*p + k`` as PyTorch defines it."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ttscli.nn.conv import (
    Conv1d,
    ConvTranspose1d,
    DepthwiseConv1d,
    gemm_weight_cf,
    pad_time,
    shared_input_convs_cf,
)

NP_MODE = {"zeros": "constant", "reflect": "reflect", "replicate": "edge"}


def torch_padding(padding, k, d):
    span = d * (k - 1)
    if padding == "same":
        return span // 2, span - span // 2
    if padding == "causal":
        return span, 0
    return (padding, padding) if isinstance(padding, int) else padding


def direct_conv(x, w, b, stride=1, dilation=1, padding=0, mode="zeros"):
    """x [T, in] float64, w [out, in, k] -> [T', out]."""
    left, right = torch_padding(padding, w.shape[2], dilation)
    xp = np.pad(x, [(left, right), (0, 0)], mode=NP_MODE[mode])
    k = w.shape[2]
    t_out = (xp.shape[0] - dilation * (k - 1) - 1) // stride + 1
    y = np.zeros((t_out, w.shape[0]))
    for t in range(t_out):
        for j in range(k):
            y[t] += w[:, :, j] @ xp[t * stride + j * dilation]
    return y + (0.0 if b is None else b)


def direct_conv_transpose(x, w, b, stride, crop):
    """x [T, in], w [in, out, k] -> full output cropped by (left, right)."""
    t, k = x.shape[0], w.shape[2]
    full = np.zeros(((t - 1) * stride + k, w.shape[1]))
    for i in range(t):
        for j in range(k):
            full[i * stride + j] += x[i] @ w[:, :, j]
    left, right = crop
    return full[left: full.shape[0] - right] + b


def rand(r, *shape):
    return r.standard_normal(shape)


def f32(a):
    return mx.array(np.asarray(a, np.float32))


def loaded(module, r, bias=True):
    module.weight = f32(rand(r, *module.weight.shape))
    if bias:
        module.bias = f32(rand(r, *module.bias.shape))
    return module


CONV_CASES = [  # cin, cout, k, stride, dilation, padding, mode, T
    (5, 7, 3, 1, 1, 1, "zeros", 9),
    (4, 4, 7, 1, 12, 36, "zeros", 100),
    (6, 3, 5, 1, 6, "same", "zeros", 40),
    (6, 3, 4, 1, 3, "same", "reflect", 30),      # even span: the extra frame goes right
    (3, 5, 5, 1, 2, "causal", "zeros", 20),
    (8, 6, 3, 1, 1, "same", "reflect", 15),
    (4, 5, 8, 4, 1, (4, 3), "replicate", 33),    # Mimi's strided causal downsampling shape
    (4, 5, 7, 3, 1, (6, 2), "zeros", 25),        # k not a multiple of the stride
    (5, 2, 1, 2, 1, 0, "zeros", 11),
    (3, 1, 7, 1, 1, 3, "zeros", 20),             # one output channel
]


@pytest.mark.parametrize("cin,cout,k,s,d,padding,mode,t", CONV_CASES)
@pytest.mark.parametrize("form", ["__call__", "accumulate", "im2col", "output_side", "cf"])
@pytest.mark.parametrize("bias", [True, False])
def test_conv1d_forms(cin, cout, k, s, d, padding, mode, t, form, bias):
    if form == "accumulate" and s > 1 and k % s:
        pytest.skip("accumulate takes strides that divide the kernel")
    if form in ("output_side", "cf") and (s > 1 or mode != "zeros"):
        pytest.skip("output-side and channels-first forms are stride 1, zero padded")
    r = np.random.default_rng(cin * 100 + k * 10 + d)
    conv = loaded(Conv1d(cin, cout, k, stride=s, dilation=d, padding=padding, bias=bias, pad_mode=mode), r, bias)
    x = rand(r, t, cin)
    want = direct_conv(x, np.array(conv.weight, np.float64), np.array(conv.bias) if bias else None,
                       s, d, padding, mode)
    res = rand(r, *want.shape)
    if form == "cf":
        got = np.array(conv.cf(f32(x.T), residual=f32(res.T))).T
    else:
        got = np.array(getattr(conv, form)(f32(x[None]), residual=f32(res[None])))[0]
    np.testing.assert_allclose(got, want + res, atol=2e-4, rtol=1e-4)


def test_conv1d_unbatched_and_long_input_forms_agree():
    r = np.random.default_rng(3)
    conv = loaded(Conv1d(4, 3, 3, dilation=2, padding="same"), r)
    for t in (10, 700):                                  # im2col below 512 rows, taps above
        x = rand(r, t, 4)
        want = direct_conv(x, np.array(conv.weight, np.float64), np.array(conv.bias), 1, 2, "same")
        np.testing.assert_allclose(np.array(conv(f32(x))), want, atol=2e-4, rtol=1e-4)


def test_weight_replaced_rebuilds_derived_layout():
    r = np.random.default_rng(4)
    conv = loaded(Conv1d(3, 2, 3, padding=1), r)
    x = rand(r, 8, 3)
    conv(f32(x))
    conv.load_weights([("weight", f32(rand(r, 2, 3, 3)))], strict=False)
    want = direct_conv(x, np.array(conv.weight, np.float64), np.array(conv.bias), padding=1)
    np.testing.assert_allclose(np.array(conv(f32(x))), want, atol=1e-4)


@pytest.mark.parametrize("k,d", [(3, 1), (7, 4)])
def test_causal_stream_equals_one_pass(k, d):
    r = np.random.default_rng(k)
    conv = loaded(Conv1d(5, 6, k, dilation=d, padding="causal"), r)
    x = f32(rand(r, 40, 5))
    state = conv.make_state()
    chunks = [conv(x[a:b], state=state) for a, b in [(0, 1), (1, 13), (13, 14), (14, 40)]]
    np.testing.assert_allclose(np.array(mx.concatenate(chunks)), np.array(conv(x)), atol=1e-5)


def test_shared_input_convs_equal_separate():
    r = np.random.default_rng(1)
    convs = [loaded(Conv1d(4, 4, k, dilation=d, padding=d * (k - 1) // 2), r) for k, d in [(3, 1), (5, 2), (7, 3)]]
    x = f32(rand(r, 4, 50))                                                    # channels-first
    wcat = mx.concatenate([gemm_weight_cf(c.weight) for c in convs], axis=0)
    for got, c in zip(shared_input_convs_cf(x, convs, wcat, residual=x), convs):
        want = direct_conv(np.array(x, np.float64).T, np.array(c.weight, np.float64), np.array(c.bias),
                           1, c.dilation, c.pad_left) + np.array(x).T
        np.testing.assert_allclose(np.array(got).T, want, atol=2e-4, rtol=1e-4)


TRANSPOSED_CASES = [  # cin, cout, k, stride, padding, T
    (16, 8, 16, 8, 4, 11), (8, 4, 8, 4, 2, 7), (6, 5, 7, 3, 2, 9), (4, 3, 5, 5, 0, 6),
    (4, 3, 12, 4, 4, 5), (3, 2, 3, 1, 1, 6), (4, 3, 10, 5, (0, 5), 6), (3, 3, 9, 4, (1, 6), 5),
]


@pytest.mark.parametrize("cin,cout,k,s,padding,t", TRANSPOSED_CASES)
@pytest.mark.parametrize("form", ["__call__", "cf"])
def test_conv_transpose1d(cin, cout, k, s, padding, t, form):
    r = np.random.default_rng(k + s)
    up = loaded(ConvTranspose1d(cin, cout, k, s, padding), r)
    x = rand(r, t, cin)
    crop = (padding, padding) if isinstance(padding, int) else padding
    want = direct_conv_transpose(x, np.array(up.weight, np.float64), np.array(up.bias), s, crop)
    if isinstance(padding, int):                                  # PyTorch's output length
        assert want.shape[0] == (t - 1) * s - 2 * padding + k
    got = np.array(up.cf(f32(x.T))).T if form == "cf" else np.array(up(f32(x[None])))[0]
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("k,s", [(10, 5), (2, 2), (7, 3), (4, 4)])
def test_causal_transposed_conv_and_stream(k, s):
    """``"causal"`` = the right ``k - s`` samples cropped: T frames -> T*s samples, in any chunks."""
    r = np.random.default_rng(k * s)
    up = loaded(ConvTranspose1d(5, 3, k, s, "causal"), r)
    x = rand(r, 12, 5)
    want = direct_conv_transpose(x, np.array(up.weight, np.float64), np.array(up.bias), s, (0, k - s))
    assert want.shape[0] == 12 * s
    np.testing.assert_allclose(np.array(up(f32(x))), want, atol=2e-4, rtol=1e-4)
    state = up.make_state()
    chunks = [up(f32(x[a:b]), state) for a, b in [(0, 1), (1, 5), (5, 12)]]
    np.testing.assert_allclose(np.array(mx.concatenate(chunks)), want, atol=2e-4, rtol=1e-4)


@pytest.mark.parametrize("k,d,padding", [(3, 1, "same"), (3, 9, "same"), (7, 1, "causal"), (5, 2, (1, 7))])
def test_depthwise(k, d, padding):
    r = np.random.default_rng(k * d)
    c = 6
    dw = loaded(DepthwiseConv1d(c, k, d, padding), r)
    x = rand(r, 30, c)
    w = np.array(dw.weight, np.float64)
    want = np.concatenate([direct_conv(x[:, i:i + 1], w[i:i + 1], np.array(dw.bias)[i], 1, d, padding)
                           for i in range(c)], axis=1)                 # groups = channels
    np.testing.assert_allclose(np.array(dw(f32(x[None])))[0], want, atol=1e-4)
    if padding == "causal":
        state = dw.make_state()
        chunks = [dw(f32(x[a:b]), state) for a, b in [(0, 4), (4, 5), (5, 30)]]
        np.testing.assert_allclose(np.array(mx.concatenate(chunks)), want, atol=1e-4)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate"])
def test_pad_time(mode):
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    got = np.array(pad_time(mx.array(x), 3, 2, mode))
    np.testing.assert_array_equal(got, np.pad(x, [(3, 2), (0, 0)], mode=NP_MODE[mode]))
