"""The blocked (and two-thread) HiFi-GAN decoder equals one unblocked pass over the whole input."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest


@pytest.mark.parametrize("threads", ["1", "2"])
def test_blocked_decoder_equals_unblocked(model, threads, monkeypatch):
    z = mx.array(np.random.default_rng(0).standard_normal((1, 150, model.args.inter_channels)) * 0.5,
                 dtype=mx.float32)
    monkeypatch.setenv("TTSCLI_PIPER_THREADS", "1")
    whole = np.array(model.dec(z, block=10 ** 9))
    monkeypatch.setenv("TTSCLI_PIPER_THREADS", threads)
    # small blocks: many blocks per stage, uneven last blocks, both halves of the split
    blocked = np.array(model.dec(z, block=96))
    assert blocked.shape == whole.shape == (1, 150 * model.args.hop_length)
    np.testing.assert_allclose(blocked, whole, atol=2e-5)
