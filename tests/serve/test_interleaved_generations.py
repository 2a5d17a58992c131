"""Every shipped family's generations may take turns (the server interleaves requests a chunk at
a time): two requests generated in turns give exactly the audio each gives alone. Run on each
family's contract case (tests/test_contract.py: random weights or a tiny fixture)."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import ttscli  # noqa: F401 - BLAS preload before mlx
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_contract import CASES

from ttscli import api
from ttscli.generate import honoured, synthesize
from ttscli.models import family_of
from ttscli.models.base import LoadOptions
from ttscli.serve import interleaves


def in_turns(*generations) -> list[list[np.ndarray]]:
    """Each generation's chunks, taking one chunk of each in turn until all have ended."""
    out = [[] for _ in generations]
    live = list(enumerate(generations))
    while live:
        for i, g in list(live):
            x = next(g, None)
            if x is None:
                live.remove((i, g))
            else:
                out[i].append(np.array(x, copy=True))
    return out


def joined(chunks) -> np.ndarray:
    return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "kokoro" else n
                                  for n in sorted(CASES)])
def test_generations_in_turns_equal_each_alone(name, tmp_path):
    case = CASES[name](tmp_path)
    pipe = api.load(case.model, model_dir=case.model_dir, options=LoadOptions(random_weights=case.random_weights))
    assert interleaves(pipe), f"{name}: the server would run its requests one at a time"
    spec = pipe.spec
    # as the server sends them: streamed where the model streams
    a = dataclasses.replace(case.request, stream="stream" in honoured(spec, family_of(spec)))
    b = dataclasses.replace(a, text="Another request. It takes turns.", seed=(a.seed or 0) + 11)
    alone = [joined(list(synthesize(pipe, r))) for r in (a, b)]
    if not np.array_equal(alone[0], joined(list(synthesize(pipe, a)))):
        # S3Gen (Chatterbox) draws its noise from MLX's global generator: not the same twice
        # even alone, so only the shape of what each request gets is comparable
        turns = [joined(c) for c in in_turns(synthesize(pipe, a), synthesize(pipe, b))]
        assert [len(x) for x in turns] == [len(x) for x in alone] and all(np.isfinite(x).all() for x in turns)
        return
    turns = in_turns(synthesize(pipe, a), synthesize(pipe, b))
    assert all(len(c) > 0 for c in turns)
    for got, want in zip(turns, alone):
        np.testing.assert_array_equal(joined(got), want)
