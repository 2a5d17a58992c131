"""Batched sampling: each row drawn as it would be alone, in a fixed number of kernels."""
from __future__ import annotations

import mlx.core as mx

from ttscli.lm.batch import sample_rows
from ttscli.lm.decoder import graph_primitives
from ttscli.lm.sample import KeyStream, SamplingParams, logit_bias, sample

V = 512
A = SamplingParams(temperature=0.9, top_k=50)
B = SamplingParams(temperature=0.7, top_p=0.8, repetition_penalty=1.3)
C = SamplingParams(temperature=1.1, min_p=0.05)
G = SamplingParams(do_sample=False)


def _inputs(n: int, seed: int):
    mx.random.seed(seed)
    logits = mx.random.normal((n, V)) * 3
    keys = mx.stack([KeyStream(seed * 100 + i).next() for i in range(n)])
    seen = mx.random.uniform(shape=(n, V)) < 0.1
    return logits, keys, seen


def test_each_row_draws_what_it_draws_alone():
    params = [A, B, A, C, G, B, A, C]
    bias = [logit_bias(V, [3, 7])[None] if i % 3 == 0 else None for i in range(len(params))]
    for seed in range(6):
        logits, keys, seen = _inputs(len(params), seed)
        got = sample_rows(logits, params, keys, seen=seen, bias=bias).tolist()
        alone = [sample(logits[i:i + 1], p, keys[i], seen=seen[i:i + 1], bias=bias[i]).item()
                 for i, p in enumerate(params)]
        assert got == alone
        # the draws do depend on the keys (a test that cannot fail would not)
        other = sample_rows(logits, params, mx.stack([KeyStream(999 + i).next() for i in range(len(params))]),
                            seen=seen, bias=bias).tolist()
        assert other != got


def test_one_params_group_is_a_fixed_number_of_kernels():
    """The draw for 64 rows is as many primitives as for 2 (no per-row subgraph)."""
    def count(n: int) -> int:
        logits, keys, seen = _inputs(n, 0)
        mx.eval(logits, keys, seen)
        return graph_primitives(sample_rows(logits, [B] * n, keys, seen=seen, bias=logit_bias(V, [5])[None]))["kernels"]

    assert count(64) == count(2)
