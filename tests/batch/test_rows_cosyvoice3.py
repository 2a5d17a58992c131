"""CosyVoice3 rows (cosyvoice3/rows.py) on the tiny checkpoint: each request's audio equals the
same request alone with the same seed (LM tokens from one batched Qwen2 forward per token, RAS
drawn per row with the row's own generator; the flow and HiFT one-shot or on upstream's token
hops per row), in every mode (zero-shot clone, cross-lingual, instruct, the stored speaker),
rows of different lengths joining at different times; a dropped request leaves the batch; the
server runs two concurrent requests as rows of one batch. Equal means exactly equal (tolerance
0): on the CPU the batched LM rounds as a lone row's does here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rowcheck import check_equal_alone, served_together, streamed, whole

from ttscli import api
from ttscli.batching import feed, run_rows
from ttscli.models.base import Request
from ttscli.serve.worker import DONE

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3" / "tiny"
GREEDY = {"do_sample": False}     # the tiny LM's greedy tokens never stop: rows run to their limit


def load():
    p = api.load("cosyvoice3", model_dir=TINY)
    p.max_chunk_chars = 24
    return p


@pytest.fixture(scope="module")
def pipe():
    return load()


REF = (0.2 * np.sin(2 * np.pi * 180 * np.arange(24000) / 24000)).astype(np.float32)   # 1 s: 25 tokens
CLONE = {"ref_audio": REF, "ref_sample_rate": 24000}


def requests() -> list[Request]:
    return [
        Request("Hello the world.", seed=1, max_frames=10, ignore_eos=True, ref_text="What I said.", **CLONE),
        Request("Across languages, and more.", seed=2, max_frames=6, ignore_eos=True,
                knobs={"x_vector_only": True}, **CLONE),
        Request("Said as told.", seed=3, max_frames=14, ignore_eos=True, instruct="Speak slowly.", **CLONE),
        Request("The stored speaker, stopping on its own.", seed=4, speed=1.5),
        Request("Never stops in time.", seed=5, max_frames=3, knobs=GREEDY),     # an overrun: fails alone
    ]


def test_whole_requests_as_rows_equal_alone(pipe):
    reqs = requests()
    got, errors = whole(pipe, reqs, max_batch=3)
    assert set(errors) == {4}
    check_equal_alone(pipe, reqs, got, errors)


def test_streamed_rows_joining_late_equal_alone(pipe):
    """Two streamed requests (the reference's 25 tokens need no hop padding: a pass at 28 tokens,
    then the last) among one-shot ones of other modes and lengths, arriving at three times."""
    reqs = [*requests()[:3],
            Request("Streamed in hops.", seed=6, max_frames=32, ignore_eos=True, stream=True,
                    ref_text="What I said.", **CLONE),
            Request("Streamed, told.", seed=7, max_frames=8, ignore_eos=True, stream=True,
                    instruct="Speak slowly.", knobs=GREEDY, **CLONE)]
    pieces, errors, stats = streamed(pipe, reqs, {1: [3, 0], 3: [4, 1], 6: [2]}, max_batch=4)
    assert stats.largest > 2 and not errors
    # each piece the row hands over, then the crossfade's held tail: audio at the hop and at the
    # end of the first streamed row, at the end only of the one too short for a hop and of the
    # one-shot single-chunk rows
    assert [len(pieces[k]) for k in (3, 4, 0, 2)] == [2 + 1, 1 + 1, 1 + 1, 1 + 1]
    check_equal_alone(pipe, reqs, {k: np.concatenate(v) for k, v in pieces.items()}, errors)


def test_a_dropped_request_leaves_the_batch_and_the_others_finish(pipe):
    """The streamed request is dropped at its first audio: its row stops drawing and leaves the
    LM batch while the other row runs on, whose audio is unchanged."""
    reqs = [Request("Streamed, then gone.", seed=8, max_frames=200, ignore_eos=True, stream=True,
                    ref_text="What I said.", **CLONE),
            Request("Stays to the end.", seed=9, max_frames=36, ignore_eos=True, **CLONE)]
    gen, gone, got, started = pipe.rows(), set(), {}, []
    start = gen.start

    def start_and_keep(r: Request):
        started.append(start(r))
        return started[-1]

    gen.start = start_and_keep
    for k, x in run_rows(pipe, gen, feed(list(enumerate(reqs))), max_batch=2, drop=lambda k: k in gone):
        assert not isinstance(x, BaseException), x
        if isinstance(x, np.ndarray):
            got.setdefault(k, []).append(x)
            gone.add(0)     # request 0's first audio (at 28 tokens) comes before request 1 ends
    assert len(got[0]) == 1 and len(started[0].state.tokens) < 200
    assert gen.rows.members == [] and gen.rows.batch.size == 0
    check_equal_alone(pipe, reqs[1:], {0: np.concatenate(got[1])}, {})


def test_serve_runs_two_concurrent_requests_as_rows_of_one_batch(pipe):
    reqs = requests()[:2]
    answers, largest = served_together(load, reqs)
    assert largest == 2
    assert all(a[-1] is DONE for a in answers)
    check_equal_alone(pipe, reqs, {k: np.concatenate(a[:-1]) for k, a in enumerate(answers)}, {})
