"""The generator's FFT convolution (ttscli.backends.onnx.vocoder.ConvNet.conv_fft) against the
direct conv and against numpy's own correlation: every planned span, lengths shorter and longer
than a block, with the Snake scales folded into the weight."""
from __future__ import annotations

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

from ttscli.backends.onnx.graph import Builder, Quant
from ttscli.backends.onnx.vocoder import FFT_BLOCK, ConvNet


def _session(w: dict, k: int, d: int, min_channels: int | None, scales: bool):
    from onnx import TensorProto, helper

    b = Builder(Quant())
    net = ConvNet(b, w, conv2d=True)
    net.fft_min_channels = min_channels
    ci = w["c.weight"].shape[1]
    kw = {}
    if scales:
        kw = dict(in_scale=np.linspace(0.5, 2.0, ci).astype(np.float32),
                  out_scale=np.linspace(1.5, 0.25, w["c.weight"].shape[0]).astype(np.float32))
    y = net.conv("x", "c", dilation=d, pad=(d * (k - 1) // 2,) * 2, **kw)
    g = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ci, 1, None])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], initializer=b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    ops = {n.op_type for n in b.nodes}
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]), ops


def _numpy_conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray, d: int) -> np.ndarray:
    """Same-padded dilated correlation in float64, as torch's Conv1d computes it."""
    co, ci, k = w.shape
    pad = d * (k - 1) // 2
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad)))
    T = x.shape[1]
    out = np.zeros((co, T)) + bias[:, None]
    for j in range(k):
        out += w[:, :, j].astype(np.float64) @ xp[:, j * d:j * d + T]
    return out


@pytest.mark.parametrize("k,d", [(7, 1), (11, 1), (11, 3)])
@pytest.mark.parametrize("T", [5, 61, 1000])
def test_fft_conv_equals_the_direct_conv(k, d, T):
    assert (k, d) in FFT_BLOCK
    rng = np.random.default_rng(k * 100 + d + T)
    ci, co = 6, 5
    w = {"c.weight": (rng.standard_normal((co, ci, k)) / np.sqrt(ci * k)).astype(np.float32),
         "c.bias": rng.standard_normal(co).astype(np.float32)}
    x = rng.standard_normal((1, ci, 1, T)).astype(np.float32)
    fft, ops = _session(w, k, d, 1, scales=False)
    direct, direct_ops = _session(w, k, d, None, scales=False)
    assert "MatMul" in ops and "MatMul" not in direct_ops        # the FFT path was taken, and only there
    yf, = fft.run(None, {"x": x})
    yd, = direct.run(None, {"x": x})
    ref = _numpy_conv(x[0, :, 0], w["c.weight"], w["c.bias"], d)
    assert yf.shape == yd.shape == (1, co, 1, T)
    scale = np.abs(ref).max()
    assert np.abs(yf[0, :, 0] - ref).max() <= 1e-6 * scale * np.sqrt(ci * k)
    assert np.abs(yf - yd).max() <= 2e-6 * scale * np.sqrt(ci * k)


def test_fft_conv_takes_the_folded_snake_scales():
    rng = np.random.default_rng(3)
    w = {"c.weight": rng.standard_normal((4, 3, 11)).astype(np.float32),
         "c.bias": rng.standard_normal(4).astype(np.float32)}
    x = rng.standard_normal((1, 3, 1, 300)).astype(np.float32)
    yf, = _session(w, 11, 1, 1, scales=True)[0].run(None, {"x": x})
    yd, = _session(w, 11, 1, None, scales=True)[0].run(None, {"x": x})
    assert np.abs(yf - yd).max() <= 1e-5 * np.abs(yd).max()


def test_only_the_planned_convs_take_the_fft_path():
    rng = np.random.default_rng(4)
    for k, d in ((3, 1), (3, 5), (7, 1), (7, 3), (11, 3), (11, 5)):
        w = {"c.weight": rng.standard_normal((4, 4, k)).astype(np.float32)}
        _, ops = _session(w, k, d, 1, scales=False)
        assert ("MatMul" in ops) == ((k, d) in FFT_BLOCK), (k, d)
    w = {"c.weight": rng.standard_normal((4, 4, 11)).astype(np.float32)}
    assert "MatMul" not in _session(w, 11, 1, 8, scales=False)[1]  # fewer channels than the threshold
