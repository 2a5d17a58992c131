"""Samplers: filters, penalty, guards, seeding."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import UsageError
from ttscli.lm.sample import KeyStream, SamplingParams, apply_repetition_penalty, filter_logits, logit_bias, sample


def kept(x):
    return set(np.flatnonzero(np.isfinite(np.array(x[0]))).tolist())


def test_top_k_top_p_min_p_keep_the_right_ids():
    logits = mx.array([[4.0, 3.0, 2.0, 1.0, 0.0, -1.0]])
    assert kept(filter_logits(logits, SamplingParams(top_k=3))) == {0, 1, 2}
    p = np.exp([4, 3, 2, 1, 0, -1.0])
    p /= p.sum()                                             # 0.64, 0.24, 0.09, ...
    assert kept(filter_logits(logits, SamplingParams(top_p=0.7))) == {0, 1}
    assert kept(filter_logits(logits, SamplingParams(top_p=0.5))) == {0}
    assert kept(filter_logits(logits, SamplingParams(min_p=0.2))) == {0, 1}
    np.testing.assert_allclose(np.array(filter_logits(logits, SamplingParams(temperature=0.5)))[0],
                               np.array([8, 6, 4, 2, 0, -2.0]))


def test_repetition_penalty_ctrl_rule():
    logits = mx.array([[2.0, -2.0, 1.0]])
    seen = mx.array([[True, True, False]])
    np.testing.assert_allclose(np.array(apply_repetition_penalty(logits, seen, 2.0)), [[1.0, -4.0, 1.0]])


def test_nan_logits_are_never_drawn():
    logits = mx.array([[float("nan"), 1.0, 5.0]])
    assert int(sample(logits, SamplingParams(do_sample=False))[0]) == 2
    ks = KeyStream(0)
    for _ in range(20):
        assert int(sample(logits, SamplingParams(temperature=1.0), ks.next())[0]) in (1, 2)


def test_bias_blocks_ids_and_seed_reproduces():
    logits = mx.zeros((1, 50))
    bias = logit_bias(50, range(10, 50))[None]
    a = [int(sample(logits, SamplingParams(), k, bias=bias)[0]) for k in mx.random.split(mx.random.key(1), 30)]
    b = [int(sample(logits, SamplingParams(), k, bias=bias)[0]) for k in mx.random.split(mx.random.key(1), 30)]
    assert a == b and max(a) < 10 and len(set(a)) > 3


@pytest.mark.parametrize("kw", [dict(temperature=-1), dict(top_k=-2), dict(top_p=0.0), dict(top_p=1.5),
                                dict(min_p=1.0), dict(repetition_penalty=0.0), dict(temperature=float("nan"))])
def test_validation(kw):
    with pytest.raises(UsageError):
        SamplingParams(**kw).validate()
