"""Relative-position logits <-> absolute positions, against their definitions."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ttscli.models.piper.text_encoder import absolute_to_relative, relative_to_absolute


@pytest.mark.parametrize("t,w", [(1, 4), (3, 4), (9, 4), (40, 2)])
def test_relative_absolute_round_trip(t, w):
    r = np.random.default_rng(t).standard_normal((2, t, 2 * w + 1)).astype(np.float32)
    p = np.random.default_rng(t + 1).standard_normal((2, t, t)).astype(np.float32)
    want_abs = np.zeros((2, t, t), np.float32)
    want_rel = np.zeros((2, t, 2 * w + 1), np.float32)
    for i in range(t):
        for j in range(t):
            if abs(j - i) <= w:
                want_abs[:, i, j] = r[:, i, j - i + w]
                want_rel[:, i, j - i + w] = p[:, i, j]
    np.testing.assert_array_equal(np.array(relative_to_absolute(mx.array(r), w)), want_abs)
    np.testing.assert_array_equal(np.array(absolute_to_relative(mx.array(p), w)), want_rel)
