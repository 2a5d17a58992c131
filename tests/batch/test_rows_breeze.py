"""Breeze TTS 2 rows (breeze_tts/rows.py) on the tiny checkpoint: each request's audio equals the
same request alone with the same seed, with and without CFG (two backbone rows per request),
rows of different lengths admitted at different times; and the server runs two concurrent
requests as rows of one batch. Equal means exactly equal here (tolerance 0): on the CPU the
batched, left-padded backbone rounds as a lone row's does at these sizes, and each request has
its own depth decoder pass and speech decoder stream."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rowcheck import check_equal_alone, served_together, streamed, whole

from ttscli import api
from ttscli.models.base import Request
from ttscli.serve.worker import DONE

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "breeze" / "tiny"
ATOL = 0.0


def load():
    p = api.load("breeze-tts-2", model_dir=TINY)
    p.max_chunk_chars = 24
    return p


@pytest.fixture(scope="module")
def pipe():
    return load()


def requests() -> list[Request]:
    return [
        Request("Hello the world.", seed=1, max_frames=6, ignore_eos=True),
        Request("A calm one, guided. And more.", seed=2, max_frames=4, ignore_eos=True, instruct="calm",
                knobs={"cfg_scale": 2.5}),
        Request("Short.", seed=3, max_frames=9, ignore_eos=True, knobs={"temperature": 0.7, "top_k": 30}),
        Request("Never stops in time.", seed=4, max_frames=2),             # an overrun: fails alone
        Request("Streamed and guided.", seed=5, max_frames=5, ignore_eos=True, instruct="whisper",
                knobs={"cfg_scale": 2.0}, stream=True, first_chunk_frames=1, chunk_frames=2),
    ]


def test_whole_requests_as_rows_equal_alone(pipe):
    reqs = requests()
    got, errors = whole(pipe, reqs, max_batch=3)
    check_equal_alone(pipe, reqs, got, errors, ATOL)


def test_streamed_rows_joining_late_equal_alone(pipe):
    reqs = requests()
    pieces, errors, stats = streamed(pipe, reqs, {1: [0, 1], 3: [2, 3], 5: [4]}, max_batch=4)
    assert stats.largest > 1
    assert len(pieces[4]) > 2
    check_equal_alone(pipe, reqs, {k: np.concatenate(v) for k, v in pieces.items()}, errors, ATOL)


def test_serve_runs_two_concurrent_requests_as_rows_of_one_batch(pipe):
    reqs = requests()[:2]
    answers, largest = served_together(load, reqs)
    assert largest == 2
    assert all(a[-1] is DONE for a in answers)
    check_equal_alone(pipe, reqs, {k: np.concatenate(a[:-1]) for k, a in enumerate(answers)}, {}, ATOL)
