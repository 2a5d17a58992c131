"""Chatterbox rows (chatterbox/rows.py) on the tiny checkpoint: each request's audio equals the
same request alone with the same seed (T3 tokens from one batched backbone forward per token,
CFG's two rows per request or one without CFG; S3Gen one-shot or streamed per request), rows of
different lengths admitted at different times; and the server runs two concurrent requests as
rows of one batch. Equal means exactly equal (tolerance 0): each request's S3Gen draws come
from its own seeded key, and on the CPU the batched T3 rounds as a lone row's does here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rowcheck import check_equal_alone, served_together, streamed, whole

from ttscli import api
from ttscli.models.base import Request
from ttscli.serve.worker import DONE

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox" / "tiny"


def load():
    p = api.load("chatterbox", model_dir=TINY)
    p.max_chunk_chars = 24
    return p


@pytest.fixture(scope="module")
def pipe():
    return load()


def requests() -> list[Request]:
    return [
        Request("Hello the world.", seed=1, max_frames=10, ignore_eos=True),
        Request("No guidance here, and more.", seed=2, max_frames=9, ignore_eos=True,
                knobs={"cfg_weight": 0.0, "temperature": 0.6}),
        Request("Short.", seed=3, max_frames=14, ignore_eos=True, knobs={"exaggeration": 0.8}),
        Request("Never stops in time.", seed=4, max_frames=3),              # an overrun: fails alone
        Request("Streamed in chunks.", seed=5, max_frames=13, ignore_eos=True, stream=True,
                first_chunk_frames=8, chunk_frames=2),
    ]


def test_whole_requests_as_rows_equal_alone(pipe):
    reqs = requests()
    got, errors = whole(pipe, reqs, max_batch=3)
    check_equal_alone(pipe, reqs, got, errors)


def test_streamed_rows_joining_late_equal_alone(pipe):
    reqs = requests()
    pieces, errors, stats = streamed(pipe, reqs, {1: [0, 1], 3: [2, 3], 5: [4]}, max_batch=4)
    assert stats.largest > 1
    assert len(pieces[4]) > 1
    check_equal_alone(pipe, reqs, {k: np.concatenate(v) for k, v in pieces.items()}, errors)


def test_serve_runs_two_concurrent_requests_as_rows_of_one_batch(pipe):
    reqs = requests()[:2]
    answers, largest = served_together(load, reqs)
    assert largest == 2
    assert all(a[-1] is DONE for a in answers)
    check_equal_alone(pipe, reqs, {k: np.concatenate(a[:-1]) for k, a in enumerate(answers)}, {})
