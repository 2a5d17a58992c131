"""torch.nn.LSTM's definition in float64 numpy (gates i, f, g, o; two biases; zero initial
state), the reference the MLX LSTM tests compare with."""
import numpy as np


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def lstm_direction(x, wih, whh, bih, bhh):
    """One direction over ``x [T, in]`` -> every step's hidden state ``[T, H]``."""
    h = np.zeros(whh.shape[1])
    c = np.zeros(whh.shape[1])
    out = []
    for xt in x:
        i, f, g, o = np.split(wih @ xt + bih + whh @ h + bhh, 4)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.array(out)
