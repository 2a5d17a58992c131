"""ttscli.nn.init.random_weights: random weights at a model's real size, the same for the same seed."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ttscli.nn.init import POOL_SIZE, random_weights


class Toy(nn.Module):
    def __init__(self, wide: int = 64):
        super().__init__()
        self.proj = nn.Linear(wide, 32)
        self.norm = nn.RMSNorm(32)
        self.conv = nn.Conv1d(8, 16, kernel_size=3)
        self.table = nn.Embedding(POOL_SIZE // 100 + 7, 128)   # larger than the pool: tiled


def _flat(model) -> dict[str, np.ndarray]:
    return {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}


def test_matrices_are_fan_in_scaled_biases_zero_and_norms_kept():
    toy = Toy()
    toy.norm.weight = mx.full((32,), 0.5)
    w = _flat(random_weights(toy))
    assert abs(w["proj.weight"].std() * np.sqrt(64) - 1) < 0.1
    assert abs(w["conv.weight"].std() * np.sqrt(3 * 8) - 1) < 0.15      # MLX kernels: [out, k, in]
    assert abs(w["table.weight"].std() * np.sqrt(128) - 1) < 0.02
    assert np.all(w["norm.weight"] == 0.5) and np.all(w["proj.bias"] == 0) and np.all(w["conv.bias"] == 0)
    assert np.isfinite(w["table.weight"]).all() and w["table.weight"].shape == (POOL_SIZE // 100 + 7, 128)


def test_the_same_seed_gives_the_same_weights_and_tensors_differ():
    a, b, c = _flat(random_weights(Toy())), _flat(random_weights(Toy())), _flat(random_weights(Toy(), seed=1))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["proj.weight"], c["proj.weight"])
    # two tensors of one model start at different places of the pool
    assert not np.allclose(a["proj.weight"].ravel()[:64], a["conv.weight"].ravel()[:64] * np.sqrt(24 / 64))


def test_dtype_keep_float32_and_rule():
    def rule(name, w, normal):
        return 1.0 + 0.05 * normal if name == "norm.weight" else w

    model = random_weights(Toy(), dtype="bfloat16", keep_float32=lambda k: k == "proj.weight", rule=rule)
    assert model.proj.weight.dtype == mx.float32 and model.conv.weight.dtype == mx.bfloat16
    gain = np.array(model.norm.weight.astype(mx.float32))
    assert 0.8 < gain.min() < 1 < gain.max() < 1.2
