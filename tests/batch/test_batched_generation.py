"""Batched Qwen3-TTS (ttscli.lm.batch + qwen3_tts/batched.py under the engine's row scheduler,
ttscli.batching): every request's audio equals the same request run alone with the same seed,
while rows of different prompt lengths, sampling settings, chunks and stops leave the batch and
others join it. "Equal" is exact here: a row's codes equal the lone run's (batched matmuls on
the CPU round alike at these sizes) and each row has its own speech decoder stream."""
from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli import api
from ttscli.batching import BatchStats, feed, run_rows, stream_many, synthesize_many
from ttscli.generate import synthesize
from ttscli.lm import KVCache, SamplingParams
from ttscli.lm.batch import BatchKVCache, RowBatch, merge, select
from ttscli.models.base import Request

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qwen3_e2e"))
from e2e_fixture import build

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rowcheck import check_equal_alone

CV = "qwen3-tts-1.7b-customvoice"


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    # the e2e checkpoint: its EOS row is scaled so that sampling stops within a few dozen frames
    ckpt = build("customvoice", tmp_path_factory.mktemp("batched") / "cv", eos_gain=3.0)
    p = api.load(CV, model_dir=ckpt)
    p.max_chunk_chars = 32    # short chunks: most requests below are several chunks
    return p


def requests() -> list[Request]:
    """Different prompt lengths, voices, sampling settings, chunk counts and stops."""
    return [
        Request("Hi.", voice="serena", seed=100, max_frames=40),
        Request("A somewhat longer sentence for the second row.", voice="ryan", seed=101, max_frames=40,
                knobs={"temperature": 0.7, "top_k": 20, "subtalker_temperature": 0.5}),
        Request("Third one, medium length. And a second sentence in it.", voice="serena", seed=102,
                max_frames=40, knobs={"do_sample": False, "subtalker_do_sample": False}),
        Request("The fourth row runs to its limit.", voice="ryan", seed=103, max_frames=13, ignore_eos=True),
        Request("Five.", voice="serena", seed=104, max_frames=2),       # too few frames: fails alone
        Request("Streamed in small pieces.", voice="ryan", seed=105, max_frames=40, stream=True,
                first_chunk_frames=2, chunk_frames=3),
    ]


@pytest.mark.parametrize("max_batch", [pytest.param(8, marks=pytest.mark.slow), 3])
def test_whole_requests_as_rows_equal_alone(pipe, max_batch):
    """ttscli batch's path: every chunk of every request a row; with 3 slots the later rows are
    admitted as earlier ones end."""
    reqs = requests()
    got, errors = {}, {}
    for k, x in synthesize_many(pipe, list(enumerate(reqs)), max_batch=max_batch):
        if isinstance(x, BaseException):
            errors[k] = str(x)
        else:
            got[k] = x
    assert set(got) | set(errors) == set(range(len(reqs)))
    check_equal_alone(pipe, reqs, got, errors)
    assert len({len(x) for x in got.values()}) > 1     # rows of different lengths


def test_streamed_rows_join_late_and_equal_alone(pipe):
    """serve's path: requests arrive while others run (one at the first step, the rest later),
    each request's chunks run one after another, audio streams as it is decoded."""
    reqs = requests()
    arrivals = {1: [0, 2], 4: [1, 3, 5], 9: [4]}    # step -> requests that arrive then
    calls = {"n": 0}
    waiting: list = []

    def source(n):
        calls["n"] += 1
        waiting.extend((k, reqs[k]) for k in arrivals.pop(calls["n"], []))
        take = waiting[:n]
        del waiting[:n]
        if not take and arrivals and calls["n"] < 100:
            return source(n) if not waiting and calls["n"] + 1 in arrivals else []
        return take

    pieces: dict = {}
    errors, done = {}, set()
    stats = BatchStats()
    for k, x in stream_many(pipe, source, drop=lambda k: False, max_batch=4, stats=stats):
        assert k not in done and k not in errors
        if isinstance(x, BaseException):
            errors[k] = str(x)
        elif isinstance(x, np.ndarray):
            pieces.setdefault(k, []).append(x)
        else:
            done.add(k)
    assert done | set(errors) == set(range(len(reqs)))
    assert 1 < stats.largest <= 4
    assert len(pieces[5]) > 2                          # the streamed request came in pieces
    check_equal_alone(pipe, reqs, {k: np.concatenate(v) for k, v in pieces.items()}, errors)


def test_speak_workers_runs_chunks_as_rows(pipe):
    """speak --workers 3: a request's sentence chunks as rows at once, the audio in order and
    equal to --workers 1's."""
    r = Request("One sentence first. Then a second one. A third sentence, too. And a fourth!",
                voice="ryan", seed=5, max_frames=40)
    seen = []
    many = np.concatenate(list(synthesize(pipe, r, workers=3, on_chunk=lambda d, t: seen.append((d, t)))))
    one = np.concatenate(list(synthesize(pipe, r)))
    np.testing.assert_array_equal(many, one)
    assert seen[-1] == (4, 4) and len(seen) == 4


def test_a_dropped_request_leaves_and_the_others_finish(pipe):
    reqs = requests()[:3]
    gone = set()
    got: dict = {}
    for k, x in run_rows(pipe, pipe.rows(), feed(list(enumerate(reqs))), max_batch=3,
                         drop=lambda k: k in gone):
        if isinstance(x, np.ndarray):
            got.setdefault(k, []).append(x)
            gone.add(1)
        else:
            assert k != 1 and not isinstance(x, BaseException)
            got.setdefault(k, [])
    assert 1 not in got or len(got[1]) == 0
    check_equal_alone(pipe, [reqs[0]], {0: np.concatenate(got[0])}, {})


def test_cache_merge_and_select_keep_each_rows_attention():
    """Left-padded rows in one batch cache attend exactly as their own caches do."""
    from ttscli.lm import DecoderLM, LMArgs

    mx.random.seed(0)
    a = LMArgs(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6, vocab_size=50, qk_norm=True)
    lm = DecoderLM(a)
    mx.eval(lm.parameters())
    lens = [3, 7, 5]
    xs = [mx.random.normal((1, n, 32)) for n in lens]
    own = []
    for x in xs:
        c = lm.make_cache()
        lm(cache=c, input_embeddings=x)
        own.append(c)
    batch = RowBatch(lm)
    batch.join(own[:2])
    batch.join(own[2:])
    assert batch.caches[0].pad == [4, 0, 2]
    step = mx.random.normal((3, 1, 32))
    h = batch.step(step)
    for i, c in enumerate(own):
        ref = lm(cache=c, input_embeddings=step[i:i + 1])[:, -1]
        assert mx.abs(h[i] - ref[0]).max().item() < 1e-5
    batch.keep([2, 0])
    assert batch.caches[0].pad == [0, 2]  # the slot only row 1 needed is gone
    step2 = mx.random.normal((2, 1, 32))
    h2 = batch.step(step2)
    for j, i in enumerate([2, 0]):
        ref = lm(cache=own[i], input_embeddings=step2[j:j + 1])[:, -1]
        assert mx.abs(h2[j] - ref[0]).max().item() < 1e-5
    assert isinstance(merge([own[0][0]]), BatchKVCache) and isinstance(select(batch.caches[0], [1]), BatchKVCache)
    assert isinstance(own[0][0], KVCache) and SamplingParams().greedy is False


def test_rows_joining_together_with_one_prompt_length_are_prefilled_as_one_batch(pipe):
    """Same text, different seeds and params: one prefill forward for the group, each row
    still equal to its request alone."""
    reqs = [Request("Hi.", voice="serena", seed=7 + i, max_frames=40,
                    knobs=[{}, {"temperature": 0.7, "top_k": 20}][i % 2]) for i in range(5)]
    calls = []
    talker = pipe.model.talker
    forward = talker.__class__.__call__

    def counting(self, embeds, cache=None):
        calls.append(embeds.shape[0])
        return forward(self, embeds, cache)

    talker.__class__.__call__ = counting
    try:
        out = dict(synthesize_many(pipe, list(enumerate(reqs)), max_batch=5))
    finally:
        talker.__class__.__call__ = forward
    assert calls == [5]          # one prefill forward for the five rows
    check_equal_alone(pipe, reqs, out, {})
