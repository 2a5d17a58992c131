"""`--stream` through the whole tiny Chatterbox (T3 and S3Gen real, nothing stubbed): the first
audio comes out of the first T3 chunk, and bench's figures add T3 and S3Gen up over the chunks
without counting either one's time as the other's."""
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from ttscli.generate import Request
from ttscli.models.base import LoadOptions
from ttscli.models.chatterbox.family import FAMILY
from ttscli.models.chatterbox.load import load_pipeline
from ttscli.codecs.s3gen import S3Gen
from ttscli.codecs.s3gen.flow import FlowArgs

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"
G = np.load(FIX / "t3_goldens.npz")
GREEDY = {"temperature": 0.0, "repetition_penalty": 1.2, "cfg_weight": 0.5, "min_p": 0.05, "top_p": 1.0}
TEXT = "hello world, this is the tiny check"
# the golden's tokens: speech codes, its unused id 6799 and two start-of-speech ids (6561)
SPEECH = [int(t) for t in G["greedy_rp12"] if t < 6561]


@pytest.fixture(scope="module")
def pipe():
    return load_pipeline(None, FIX / "tiny", LoadOptions())


def test_family_first_chunk_is_s3gens_minimum(pipe):
    # the published flow's sizes (FlowArgs defaults) and the tiny one's give the family's figure
    assert S3Gen.first_audio_tokens.fget(SimpleNamespace(flow=SimpleNamespace(a=FlowArgs()))) == 8
    assert pipe.s3gen.first_audio_tokens == FAMILY.first_chunk_frames == 8


def test_first_audio_from_the_first_chunk(pipe):
    pipe.reset_stats()
    r = Request(text=TEXT, max_frames=20, knobs=GREEDY, ignore_eos=True, stream=True)
    at = []          # T3 tokens drawn when each piece came out
    pieces = []
    for p in pipe.generate(r):
        at.append(pipe.stats.frames)
        pieces.append(p)
    # the 8th speech code is T3's 8th token: the first piece follows it, before T3's 9th
    assert SPEECH[:8] == [int(t) for t in G["greedy_rp12"][:8]]
    assert at[0] == 8 and pieces[0].size == 2 * 480           # 2 final mel frames of 480 samples
    assert at[-1] == 20 and sum(p.size for p in pieces) == len(SPEECH) * 960
    assert pipe.stats.extra["s3gen_passes"] == 2               # 8, then the other 9 (final)


def test_streamed_bench_figures(pipe):
    from ttscli.bench import run_once

    r = Request(text=TEXT, max_frames=20, knobs=GREEDY, ignore_eos=True, stream=True, chunk_frames=4)
    t0 = time.perf_counter()
    fig = run_once(pipe, r)
    wall = time.perf_counter() - t0
    fig.update(FAMILY.bench_components(pipe, None))
    s = pipe.stats
    # 17 speech codes in chunks of 8, 4, then the last 5 (of a hop of 8): three passes, each timed
    # in flow and HiFT
    assert fig["s3gen_passes"] == 3 and fig["s3gen_flow_s"] > 0 and fig["s3gen_hift_s"] > 0
    assert s.decoder_s == pytest.approx(fig["s3gen_flow_s"] + fig["s3gen_hift_s"])
    assert fig["s3gen_s_per_audio_s"] == pytest.approx(s.decoder_s / (len(SPEECH) / 25))
    # T3: the prefill and 19 steps, none of them holding an S3Gen pass
    assert len(s.frame_s) == 19 and fig["t3_s"] >= s.prefill_s + sum(s.frame_s) > 0
    # each counted once: together they fit in the run's wall time (S3Gen's time counted in T3's
    # steps as well, as it was, would not), and leave little of it unaccounted for
    assert fig["t3_s"] + s.decoder_s <= fig["total_s"] <= wall
    assert fig["t3_s"] + s.decoder_s >= 0.5 * fig["total_s"]
    # first audio: after the prefill, 8 T3 steps and the first pass, before the end
    assert fig["first_audio_s"] < fig["total_s"]
    assert fig["first_audio_s"] >= s.prefill_s + sum(s.frame_s[:7])
