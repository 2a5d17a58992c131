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


def _smooth(v, interior):
    """A toy stage: 2x upsampling (repeat) then a 3-tap mean, zero-padded at the ends."""
    u = mx.repeat(v, 2, axis=1)
    p = mx.pad(u, [(0, 0), (1, 1)])
    return (p[:, :-2] + p[:, 1:-1] + p[:, 2:]) / 3, 0


def test_blocked_chain_equals_stage_by_stage(monkeypatch):
    from ttscli.models.piper.blocked import blocked, blocked_chain

    monkeypatch.setenv("TTSCLI_PIPER_THREADS", "2")
    x = mx.array(np.random.default_rng(0).standard_normal((3, 401)), dtype=mx.float32)
    # halo 2 input frames covers the 3-tap mean after the 2x repeat
    stages = [(_smooth, 2, 37, 2), (_smooth, 2, 50, 2), (_smooth, 2, 111, 2)]
    want = x
    for fn, *_ in stages:
        want = fn(want, False)[0]
    got = blocked_chain(stages, x)
    assert got.shape == want.shape == (3, 401 * 8)
    np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-6)
    one = x
    for st in stages:
        one = blocked(st[0], one, *st[1:])
    np.testing.assert_allclose(np.array(one), np.array(want), atol=1e-6)


def test_blocked_chain_error_reaches_the_caller(monkeypatch):
    from ttscli.models.piper.blocked import blocked_chain

    monkeypatch.setenv("TTSCLI_PIPER_THREADS", "2")
    calls = []

    def failing(v, interior):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return _smooth(v, interior)

    x = mx.array(np.random.default_rng(0).standard_normal((3, 401)), dtype=mx.float32)
    with pytest.raises(KeyboardInterrupt):
        blocked_chain([(failing, 2, 37, 2), (failing, 2, 50, 2)], x)


def test_two_thread_decoder_with_weights_just_replaced(model, monkeypatch):
    """Weights replaced by lazy arrays (as a parity test perturbing one does): the worker
    thread must not be the first to evaluate them."""
    monkeypatch.setenv("TTSCLI_PIPER_THREADS", "2")
    z = mx.array(np.random.default_rng(1).standard_normal((1, 150, model.args.inter_channels)) * 0.5,
                 dtype=mx.float32)
    convs = [model.dec.conv_post] + [c for b in model.dec.resblocks for c in b.children_convs()]
    saved = [c.weight for c in convs]
    try:
        for c in convs:
            c.weight = c.weight * 1.0          # lazy, on this thread's stream
        out = np.array(model.dec(z, block=96))
    finally:
        for c, w in zip(convs, saved):
            c.weight = w
    np.testing.assert_allclose(out, np.array(model.dec(z, block=96)), atol=1e-6)
