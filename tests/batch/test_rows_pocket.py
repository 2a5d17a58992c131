"""Pocket TTS rows (pocket_tts/rows.py) on the tiny checkpoint: each request's audio equals the
same request alone with the same seed (a preset voice, a clone, different text lengths and
settings, rows admitted at different times, a request of several chunks, an EOS stop and a
frame limit), streamed rows come out in the request's chunks and equal the one-shot audio, a
dropped row leaves the batch, and the server runs two concurrent requests as rows of one batch.

Equal means within ATOL, not bit for bit: a row alone gives exactly the single path's samples,
but with other rows beside it the flow LM's and the flow head's matmuls take a batch of rows,
which MLX's CPU kernels round differently from one row (about 1e-6 at these sizes); the rows'
noise, EOS decisions, frame counts and Mimi streams are each their own, so nothing else differs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rowcheck import alone, check_equal_alone, served_together, streamed, whole

from ttscli import api
from ttscli.batching import DONE, feed, run_rows
from ttscli.models.base import Request
from ttscli.serve import worker

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "pocket_tts"
TINY = FIX / "tiny"
ATOL = 1e-5
FRAME = 1920         # samples per 12.5 Hz frame at 24 kHz


def load():
    # rows run on the MLX flow LM (the default on some CPUs is onnxruntime, one row per call)
    p = api.load("pocket-tts", model_dir=TINY, backends={"flow_lm": "mlx"})
    p.max_chunk_chars = 24
    return p


@pytest.fixture(scope="module")
def pipe():
    return load()


@pytest.fixture(scope="module")
def ref():
    return np.load(FIX / "goldens.npz")["ref_audio"]


def requests(ref) -> list[Request]:
    return [
        Request("Hello the world.", seed=1, max_frames=8, ignore_eos=True),
        Request("A longer sentence to read. And a second one.", seed=2, max_frames=5, ignore_eos=True,
                knobs={"temperature": 0.7}),
        Request("Short.", seed=3),                                        # ends at its EOS
        Request("Cloned voice.", seed=4, max_frames=6, ignore_eos=True, ref_audio=ref, ref_sample_rate=24000,
                knobs={"sampler_decode_steps": 2, "noise_clamp": 0.5}),
        Request("Never stops in time.", seed=5, max_frames=2),            # its limit: fails alone
        Request("Streamed here.", seed=6, max_frames=7, ignore_eos=True, stream=True, first_chunk_frames=2,
                chunk_frames=3),
    ]


def test_whole_requests_as_rows_equal_alone(pipe, ref):
    reqs = requests(ref)
    got, errors = whole(pipe, reqs, max_batch=3)
    assert "reached 2 frames" in errors[4]
    check_equal_alone(pipe, reqs, got, errors, ATOL)


def test_streamed_rows_joining_late_equal_alone_and_one_shot(pipe, ref):
    reqs = requests(ref)
    pieces, errors, stats = streamed(pipe, reqs, {1: [0, 1], 3: [2, 3], 6: [4, 5]}, max_batch=4)
    assert stats.largest > 2
    assert len(pieces[5]) > 2
    audio = {k: np.concatenate(v) for k, v in pieces.items()}
    check_equal_alone(pipe, reqs, audio, errors, ATOL)
    one_shot, _ = alone(pipe, Request(**{**vars(reqs[5]), "stream": False}))
    np.testing.assert_allclose(audio[5], one_shot, rtol=0, atol=ATOL)


def test_a_streamed_row_hands_its_audio_out_in_the_requests_chunks(pipe):
    gen = pipe.rows()
    r = Request("Streamed here.", seed=6, max_frames=9, ignore_eos=True, stream=True, first_chunk_frames=2,
                chunk_frames=3)
    other = gen.start(Request("Beside it.", seed=7, max_frames=4, ignore_eos=True))
    row = gen.start(r)
    sizes = []
    while not row.done:
        gen.step([x for x in (row, other) if not x.done])
        out = gen.take(row)
        if out is not None:
            sizes.append(len(out))
    gen.drop(other)
    gen.drop(row)
    # each take ends on a chunk's end (2 frames, then 3 at a time, the rest last)
    assert set(np.cumsum(sizes)) <= {2 * FRAME, 5 * FRAME, 8 * FRAME, 9 * FRAME} and sum(sizes) == 9 * FRAME
    assert [len(x) for x in pipe.generate(r)] == [2 * FRAME, 3 * FRAME, 3 * FRAME, FRAME]


def test_a_dropped_row_leaves_the_batch_and_the_others_go_on(pipe, ref):
    reqs = [Request("Cut off early, please.", seed=8, max_frames=40, ignore_eos=True, stream=True),
            *requests(ref)[:2]]
    asked, gone, pieces, done = [0], set(), {}, set()

    def drop(k) -> bool:
        """Row 0 leaves after eight steps of its 40 frames (a step count, not its audio: when
        its Mimi groups are ready depends on the decoding thread's pace)."""
        if k == 0:
            asked[0] += 1
            if asked[0] > 8:
                gone.add(0)
        return k in gone

    gen = pipe.rows()
    for k, x in run_rows(pipe, gen, feed(enumerate(reqs)), max_batch=3, drop=drop):
        assert k not in gone
        if isinstance(x, np.ndarray):
            pieces.setdefault(k, []).append(x)
        else:
            assert x == DONE, x
            done.add(k)
    assert gone == {0} and done == {1, 2}
    assert gen.rows.members == [] and gen.rows.batch.size == 0
    check_equal_alone(pipe, reqs[1:], {k - 1: np.concatenate(pieces[k]) for k in (1, 2)}, {}, ATOL)


def test_serve_runs_two_concurrent_requests_as_rows_of_one_batch(pipe, ref):
    reqs = requests(ref)[:2]
    answers, largest = served_together(load, reqs)
    assert largest == 2
    assert all(a[-1] is worker.DONE for a in answers)
    check_equal_alone(pipe, reqs, {k: np.concatenate(a[:-1]) for k, a in enumerate(answers)}, {}, ATOL)


def test_cli_batch_runs_rows_together_as_alone(run_cli, tmp_path, ref):
    """`ttscli batch` (rows of one batch at --batch-size 3) writes each row as --batch-size 1 does
    (one request at a time): a preset voice, two chunks, a clone with its reference file and a
    knob; a bad voice fails its row alone."""
    import json

    import soundfile as sf

    sf.write(tmp_path / "ref.wav", ref, 24000)
    rows = [{"id": "a", "text": "Hello there.", "voice": "alba"},
            {"id": "b", "text": "A first sentence here. And a second one follows it."},
            {"id": "c", "text": "Cloned speech.", "ref_audio": "ref.wav", "temperature": 0.6},
            {"id": "bad", "text": "Hi.", "voice": "nobody"}]
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = {}
    for size in (3, 1):
        p = run_cli("batch", m, "-o", f"b{size}", "--batch-size", size, "-m", "pocket-tts", "--model-dir", TINY,
                    "--backend", "flow_lm=mlx",
                    "--seed", 9)
        assert p.returncode == 1 and "1 of 4 rows failed" in p.err, p.err
        entries = {e["id"]: e for e in map(json.loads, (tmp_path / f"b{size}" / "manifest.jsonl").read_text()
                                                .splitlines())}
        out[size] = {i: sf.read(str(tmp_path / f"b{size}" / e["path"]), dtype="int16")[0] for i, e in entries.items()}
    err = json.loads((tmp_path / "b3" / "errors.jsonl").read_text())
    assert err["id"] == "bad" and "has no voice 'nobody'" in err["error"]
    assert set(out[3]) == set(out[1]) == {"a", "b", "c"}
    for i in out[3]:
        assert len(out[3][i]) == len(out[1][i]) > 0, i
        assert np.abs(out[3][i].astype(np.int32) - out[1][i]).max() <= 1, i
