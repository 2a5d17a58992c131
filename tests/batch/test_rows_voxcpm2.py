"""VoxCPM2 rows (voxcpm2/rows.py) on the tiny checkpoint: each request's audio equals the same
request alone with the same seed (plain, voice design, clone and continuation prompts of
different lengths, different diffusion steps and guidance, rows joining while others run, a
stop and a patch limit), a streamed row hands its audio out in the request's chunks and equals
the one-shot audio, a dropped row leaves both LMs' batches, and `ttscli bench --batch` runs
the rows.

Equal means within ATOL, not bit for bit: a row alone gives exactly the single path's samples,
but with other rows beside it the LMs', patch encoder's and diffusion head's matmuls take a
batch of rows, which MLX's CPU kernels round differently from one row. Each patch feeds the
next, so the difference grows with the patches (below 1e-6 over the few patches here, on samples
of about 1); each row's noise, guidance, stop, patch count and AudioVAE stream are its own, so
nothing else differs."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rowcheck import alone, check_equal_alone, streamed

pytest.importorskip("mlx.core")

from ttscli import api
from ttscli.batching import DONE, feed, run_rows
from ttscli.models.base import Request

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "voxcpm2"
TINY = FIX / "tiny"
ATOL = 1e-5


@pytest.fixture(scope="module")
def pipe():
    return api.load("voxcpm2", model_dir=TINY)


@pytest.fixture(scope="module")
def ref():
    """A reference short enough for the tiny model's 256-position context (16 kHz)."""
    return np.load(FIX / "goldens.npz")["ref_wav"].astype(np.float32)


def requests(ref) -> list[Request]:
    clone = dict(ref_audio=ref, ref_sample_rate=16000)
    return [
        Request("Hello world.", seed=1, max_frames=7, ignore_eos=True),
        Request("A longer sentence to read, in a voice described.", seed=2, max_frames=4, ignore_eos=True,
                instruct="a warm low voice", knobs={"cfg_value": 1.5}),
        Request("Cloned.", seed=3, max_frames=5, ignore_eos=True, knobs={"inference_timesteps": 4}, **clone),
        Request("Continued from the recording.", seed=4, max_frames=6, ignore_eos=True, ref_text="Speak softly.",
                stream=True, first_chunk_frames=1, chunk_frames=2, **clone),
        Request("Never stops in time.", seed=5, max_frames=3),            # its limit: fails alone
        Request("Stops by itself.", seed=6),                              # its stop head ends it
        Request("Stops later.", seed=7, max_frames=30, knobs={"min_len": 6}),
    ]


def test_rows_joining_late_with_different_prompts_equal_alone(pipe, ref):
    """Rows join at the first, third and fifth step beside rows already generating."""
    reqs = requests(ref)
    pieces, errors, stats = streamed(pipe, reqs, {1: [0], 3: [1, 2], 5: [3, 4, 5], 6: [6]}, max_batch=5)
    assert stats.largest >= 3
    assert "reached 3 patches without its stop" in errors[4]
    assert 5 not in errors and 6 not in errors      # each ended at its own stop
    check_equal_alone(pipe, reqs, {k: np.concatenate(v) for k, v in pieces.items()}, errors, ATOL)


def test_a_streamed_row_comes_in_the_requests_chunks_and_equals_the_one_shot_audio(pipe, ref):
    gen = pipe.rows()
    r = requests(ref)[3]
    other = gen.start(Request("Beside it.", seed=7, max_frames=3, ignore_eos=True))
    row = gen.start(r)
    sizes, audio = [], []
    while not row.done:
        gen.step([x for x in (row, other) if not x.done])
        out = gen.take(row)
        if out is not None:
            sizes.append(len(out))
            audio.append(out)
    gen.drop(other)
    gen.drop(row)
    patch = pipe.args.patch_size * pipe.args.vae.decode_hop
    assert sizes == [patch, 2 * patch, 2 * patch, patch]
    one_shot, _ = alone(pipe, Request(**{**vars(r), "stream": False}))
    np.testing.assert_allclose(np.concatenate(audio), one_shot, rtol=0, atol=ATOL)


def test_a_dropped_row_leaves_the_batch_and_the_others_go_on(pipe, ref):
    """The first request's client goes away at the fourth step: nothing more of it comes out,
    its rows leave both LMs' batches, and the rows beside it end as they do alone."""
    reqs = [Request("Cut off early, please.", seed=8, max_frames=40, ignore_eos=True, stream=True),
            *requests(ref)[:2]]
    asked, pieces, done = {"n": 0}, {}, set()

    def drop(k) -> bool:
        if k == 0:
            asked["n"] += 1
        return k == 0 and asked["n"] >= 4

    gen = pipe.rows()
    for k, x in run_rows(pipe, gen, feed(enumerate(reqs)), max_batch=3, drop=drop):
        assert k != 0 or asked["n"] < 4, "audio of the dropped request after its drop"
        if isinstance(x, np.ndarray):
            pieces.setdefault(k, []).append(x)
        else:
            assert x == DONE, x
            done.add(k)
    assert done == {1, 2} and asked["n"] == 4
    assert gen.members == [] and gen.base.size == 0 and gen.residual.size == 0
    check_equal_alone(pipe, reqs[1:], {k - 1: np.concatenate(pieces[k]) for k in (1, 2)}, {}, ATOL)


def test_bench_batch_steps_rows_together(run_cli):
    """`ttscli bench voxcpm2 --batch 1,2` on the tiny checkpoint: each size's rows all ran."""
    p = run_cli("bench", "voxcpm2", "--model-dir", TINY, "--batch", "1,2", "--max-frames", 3, "--warmup", 0,
                "--json")
    assert p.returncode == 0, p.err
    variants = json.loads(p.stdout)["variants"]
    assert set(variants) == {"batch 1", "batch 2"}
    for b in (1, 2):      # B rows of 3 patches each, stepped together
        v = variants[f"batch {b}"]
        assert round(v["frames_per_s"] * v["total_s"]) == 3 * b, v
        assert v["step_ms_p50"] > 0
