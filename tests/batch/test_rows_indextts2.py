"""IndexTTS2 rows (indextts2/rows.py) on the tiny checkpoint: each request's audio equals the
same request alone with the same seed (its beams as its own rows of one GPT-2 batch, reordered
in place each step; upstream's beam search, beam sampling or single-row sampling per request
with its own keys; every segment's latent, S2Mel and BigVGAN as alone, with upstream's pause
between segments), requests of different lengths and segment counts joining at different times;
an overrun fails alone; a dropped request leaves the batch; the server runs two concurrent
requests as rows of one batch. The GPT runs on MLX in both paths (``code_decoder=mlx``), so equal
means exactly equal."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rowcheck import check_equal_alone, served_together, streamed, whole

from ttscli import api
from ttscli.batching import feed, run_rows
from ttscli.models.base import LoadOptions, Request
from ttscli.serve.worker import DONE

pytest.importorskip("yaml")
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
TINY = FIX / "tiny"


@pytest.fixture(scope="module", autouse=True)
def graph_cache(tmp_path_factory):
    """S2Mel's onnxruntime graph (the default on a Linux CPU) is built into a cache of this
    module's, not the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TTSCLI_CACHE", str(tmp_path_factory.mktemp("indextts2-rows-cache")))
    yield
    mp.undo()


def load(code_decoder: str = "mlx"):
    return api.load("indextts2", model_dir=TINY, options=LoadOptions(backends={"code_decoder": code_decoder}))


@pytest.fixture(scope="module")
def pipe():
    return load()


@pytest.fixture(scope="module")
def ref():
    return {"ref_audio": np.load(FIX / "frontend.npz")["ref22"].astype(np.float32), "ref_sample_rate": 22050}


def requests(ref) -> list[Request]:
    return [
        Request("Hello there.", seed=1, max_frames=8, ignore_eos=True, knobs={"do_sample": False}, **ref),
        Request("Sampled beams, forced.", seed=2, knobs={"tokens": 6}, **ref),
        Request("One row sampled.", seed=3, max_frames=5, ignore_eos=True, knobs={"num_beams": 1}, **ref),
        Request("Two segments, then a third one here.", seed=4, max_frames=4, ignore_eos=True,
                knobs={"segment_tokens": 4, "emotion": "happy=0.8,calm=0.2"}, **ref),
        Request("Never stops in time.", seed=5, max_frames=3, knobs={"do_sample": False}, **ref),   # fails alone
    ]


def test_rows_only_on_the_float32_arithmetic():
    assert load("onnx-f32").rows() is not None
    assert load("onnx-int8").rows() is None


def test_whole_requests_as_rows_equal_alone(pipe, ref):
    reqs = requests(ref)
    assert len(pipe.segments(reqs[3])) >= 2
    got, errors = whole(pipe, reqs, max_batch=3)
    assert set(errors) == {4} and "limit of 3 codes" in errors[4]
    check_equal_alone(pipe, reqs, got, errors)


def test_streamed_rows_joining_late_equal_alone(pipe, ref):
    """Streamed requests hand over a segment at a time (a pause before each after the first)."""
    reqs = [*requests(ref)[:3],
            Request("Streamed in three parts, one by one.", seed=6, max_frames=3, ignore_eos=True, stream=True,
                    knobs={"segment_tokens": 4}, **ref)]
    pieces, errors, stats = streamed(pipe, reqs, {1: [3, 0], 3: [1], 5: [2]}, max_batch=3)
    assert stats.largest > 1 and not errors
    assert len(pieces[3]) >= 3
    check_equal_alone(pipe, reqs, {k: np.concatenate(v) for k, v in pieces.items()}, errors)


def test_a_dropped_request_leaves_the_batch_and_the_others_finish(pipe, ref):
    reqs = [Request("Streamed, then gone after its first part.", seed=8, max_frames=3, ignore_eos=True,
                    stream=True, knobs={"segment_tokens": 4}, **ref),
            Request("Stays to the end.", seed=9, max_frames=12, ignore_eos=True, **ref)]
    gen, gone, got = pipe.rows(), set(), {}
    for k, x in run_rows(pipe, gen, feed(list(enumerate(reqs))), max_batch=2, drop=lambda k: k in gone):
        assert not isinstance(x, BaseException), x
        if isinstance(x, np.ndarray):
            got.setdefault(k, []).append(x)
            gone.add(0)
    assert len(got[0]) == 1
    assert gen.rows.members == [] and gen.rows.batch.size == 0 and gen.waiting == []
    check_equal_alone(pipe, reqs[1:], {0: np.concatenate(got[1])}, {})


def test_serve_runs_two_concurrent_requests_as_rows_of_one_batch(pipe, ref):
    reqs = requests(ref)[:2]
    answers, largest = served_together(load, reqs)
    assert largest == 2
    assert all(a[-1] is DONE for a in answers)
    check_equal_alone(pipe, reqs, {k: np.concatenate(a[:-1]) for k, a in enumerate(answers)}, {})


def test_bench_batch_runs_rows_of_each_size(ref):
    """``ttscli bench indextts2 --batch`` (the shared ``bench_rows``): every size's requests as rows,
    audio counted; a quantized code decoder, which runs no rows, is refused in one line."""
    from ttscli.batching import bench_rows
    from ttscli.errors import UsageError

    p = load()
    p.default_voice = p.voice(Request("x", **ref))       # requests without a reference, as bench makes them
    out = bench_rows(p, [1, 2], 3, "Hello there.", warmup=0)
    assert list(out) == ["batch 1", "batch 2"]
    for v in out.values():
        assert v["frames_per_s"] > 0 and v["audio_s_per_s"] > 0 and v["step_ms_p50"] > 0
    assert out["batch 1"]["speedup_vs_first"] == 1.0
    with pytest.raises(UsageError, match="--batch needs batched rows"):
        bench_rows(load("onnx-int8"), [1], 3, "Hello there.")
