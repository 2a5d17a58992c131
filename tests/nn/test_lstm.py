"""ttscli.nn.lstm.LSTM against float64 numpy written from torch.nn.LSTM's definition: stacked,
bidirectional, batched and unbatched input; the compiled step's traces do not grow with length."""
import numpy as np
import pytest
from lstm_reference import lstm_direction

import ttscli  # noqa: F401  (BLAS preload before mlx)

mx = pytest.importorskip("mlx.core")

from ttscli.nn.lstm import LSTM, _step


def _torch_lstm(x, p, layers, bidirectional):
    for k in range(layers):
        w = [p[f"{n}_l{k}"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        y = lstm_direction(x, *w)
        if bidirectional:
            wr = [p[f"{n}_l{k}_reverse"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            y = np.concatenate([y, lstm_direction(x[::-1], *wr)[::-1]], axis=1)
        x = y
    return x


@pytest.mark.parametrize("layers,bidirectional", [(1, False), (3, False), (1, True), (2, True)])
def test_lstm_is_torchs(layers, bidirectional):
    rng = np.random.default_rng(layers + 10 * bidirectional)
    m = LSTM(6, 5, layers, bidirectional=bidirectional)
    p = {k: rng.standard_normal(v.shape) * 0.5 for k, v in m.parameters().items()}
    assert len(p) == 4 * layers * (2 if bidirectional else 1)       # torch's state-dict names, all used
    m.load_weights([(k, mx.array(v.astype(np.float32))) for k, v in p.items()], strict=True)
    x = rng.standard_normal((3, 11, 6))
    got = np.array(m(mx.array(x.astype(np.float32))))
    want = np.stack([_torch_lstm(row, p, layers, bidirectional) for row in x])
    assert got.shape == (3, 11, 5 * (2 if bidirectional else 1))
    np.testing.assert_allclose(got, want, atol=3e-5)
    one = np.array(m(mx.array(x[1].astype(np.float32))))          # unbatched [T, in], as torch takes it
    np.testing.assert_allclose(one, want[1], atol=3e-5)


def test_step_traces_do_not_grow_with_length():
    m = LSTM(4, 3)
    m(mx.zeros((1, 2, 4)))
    before = len(_step)
    for t in (3, 17, 40):
        mx.eval(m(mx.ones((1, t, 4))))
    assert len(_step) == before
