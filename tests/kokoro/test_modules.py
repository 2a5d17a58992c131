"""Kokoro's building blocks against direct float64 numpy versions of PyTorch's definitions."""
import numpy as np
import pytest
from lstm_reference import lstm_direction

# ttscli before mlx: importing it loads a fast BLAS
from ttscli.models.kokoro import convert
from ttscli.nn.spectral import istft, stft_features
from ttscli.models.kokoro.modules import BiLSTM, UpsamplePool

mx = pytest.importorskip("mlx.core")


def test_bilstm_is_torchs():
    rng = np.random.default_rng(0)
    m = BiLSTM(12, 5)
    p = {}
    for sfx in ("_l0", "_l0_reverse"):
        p["weight_ih" + sfx] = rng.standard_normal((20, 12)) * 0.5
        p["weight_hh" + sfx] = rng.standard_normal((20, 5)) * 0.5
        p["bias_ih" + sfx] = rng.standard_normal(20) * 0.1
        p["bias_hh" + sfx] = rng.standard_normal(20) * 0.1
    m.load_weights([(k, mx.array(v.astype(np.float32))) for k, v in p.items()], strict=True)
    x = rng.standard_normal((9, 12))
    got = np.array(m(mx.array(x.astype(np.float32))))
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    fwd = lstm_direction(x, *(p[k + "_l0"] for k in names))
    bwd = lstm_direction(x[::-1], *(p[k + "_l0_reverse"] for k in names))[::-1]
    np.testing.assert_allclose(got, np.concatenate([fwd, bwd], axis=1), atol=2e-5)


def test_onnx_gate_order_becomes_torchs():
    h = 3
    onnx_rows = np.concatenate([np.full((h, 2), g) for g in (0, 1, 2, 3)])      # i, o, f, c
    torch_rows = convert._torch_lstm(onnx_rows, h)
    assert list(torch_rows[::h, 0]) == [0, 2, 3, 1]                               # i, f, g(c), o


def test_upsample_pool_is_a_depthwise_transposed_conv():
    rng = np.random.default_rng(1)
    c, t = 4, 7
    w, b, x = rng.standard_normal((c, 1, 3)), rng.standard_normal(c), rng.standard_normal((t, c))
    full = np.zeros((2 * (t - 1) + 3, c))
    for i in range(t):
        for j in range(3):
            full[2 * i + j] += x[i] * w[:, 0, j]
    want = full[1: 1 + 2 * t] + b                                                # padding 1, output_padding 1
    m = UpsamplePool(c)
    m.load_weights([("weight", mx.array(w.astype(np.float32))), ("bias", mx.array(b.astype(np.float32)))])
    np.testing.assert_allclose(np.array(m(mx.array(x.astype(np.float32)))), want, atol=1e-5)


def _hann(n):
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def test_stft_features_are_torch_stft_magnitude_and_angle():
    rng = np.random.default_rng(2)
    x = rng.standard_normal(600)
    xp = np.pad(x, 10, mode="reflect")
    frames = np.stack([xp[5 * f: 5 * f + 20] * _hann(20) for f in range(121)])
    spec = np.fft.rfft(frames, axis=1)
    spec.imag[:, [0, 10]] = 0.0                                                   # exactly real bins: +0
    got = np.array(stft_features(mx.array(x.astype(np.float32)), 20, 5))
    np.testing.assert_allclose(got[:, :11], np.abs(spec), atol=1e-4)
    d = np.angle(np.exp(1j * (got[:, 11:] - np.angle(spec))))                     # wrapped difference
    assert np.abs(d[np.abs(spec) > 1e-3]).max() < 1e-3
    np.testing.assert_allclose(got[:, [11, 21]], np.angle(spec[:, [0, 10]]), atol=1e-5)
    assert got[:, [11, 21]].min() >= 0.0                                          # never -pi


def test_istft_inverts_stft_with_torch_normalisation():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1200).astype(np.float32)
    f = stft_features(mx.array(x), 20, 5)
    y = np.array(istft(f[:, :11], f[:, 11:], 20, 5))
    assert y.shape == x.shape
    np.testing.assert_allclose(y, x, atol=2e-4)


def test_weight_norm_fold_and_mlx_audio_names():
    rng = np.random.default_rng(4)
    v, g = rng.standard_normal((6, 4, 3)), rng.standard_normal((6, 1, 1))
    vt, gt = rng.standard_normal((5, 2, 7)), rng.standard_normal((5, 1, 1))   # ConvTranspose: g per input channel
    sd = {"module.decoder.encode.conv1.weight_v": v, "module.decoder.encode.conv1.weight_g": g,
          "decoder.generator.ups.0.weight_v": vt, "decoder.generator.ups.0.weight_g": gt,
          "text_encoder.lstm.Wx_forward": np.ones((8, 2)), "text_encoder.lstm.bias_hh_backward": np.ones(8),
          "text_encoder.cnn.0.1.weight": np.ones(3), "bert.pooler.weight": np.ones((2, 2))}
    out = convert.from_state_dict(sd)
    np.testing.assert_allclose(out["decoder.encode.conv1.weight"],
                               g * v / np.sqrt((v ** 2).sum(axis=(1, 2), keepdims=True)), rtol=1e-5)
    np.testing.assert_allclose(out["decoder.generator.ups.0.weight"],
                               gt * vt / np.sqrt((vt ** 2).sum(axis=(1, 2), keepdims=True)), rtol=1e-5)
    assert {"text_encoder.lstm.weight_ih_l0", "text_encoder.lstm.bias_hh_l0_reverse",
            "text_encoder.cnn.0.1.gamma"} <= set(out)
    assert not any("pooler" in k for k in out)
    fixed = convert.fix_layouts({"a": np.zeros((6, 3, 4))}, {"a": (6, 4, 3)})
    assert fixed["a"].shape == (6, 4, 3)


@pytest.mark.parametrize("node, module", [
    ("/decoder/decoder/decode.0/conv1/Conv_quant", "decoder.decode.0.conv1"),
    ("/decoder/decoder/asr_res/asr_res.0/Conv_quant", "decoder.asr_res.0"),
    ("/encoder/text_encoder/cnn.2/cnn.2.0/Conv_quant", "text_encoder.cnn.2.0"),
    ("/encoder/F0.1/conv1x1/Conv_quant", "predictor.F0.1.conv1x1"),
    ("/encoder/shared/LSTM_quant", "predictor.shared"),
    ("/encoder/predictor/text_encoder/lstms.4/LSTM_quant", "predictor.text_encoder.lstms.4"),
    ("/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/query_7/MatMul_quant",
     "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query"),
    ("/decoder/decoder/generator/ups.1/ConvTranspose", "decoder.generator.ups.1"),
])
def test_onnx_node_names_to_modules(node, module):
    assert convert._module_from_node(node) == module
