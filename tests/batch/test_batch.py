"""`ttscli batch` with the embedded voice: manifests, layout, seeds, errors file, resume after a kill."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import only_line, ttscli_exe

from ttscli.batch.manifest import read_rows, rel_path, row_seed
from ttscli.filehash import file_sha256
from ttscli.errors import UsageError


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def entries(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def test_rows_from_jsonl_and_csv(tmp_path):
    j = write_jsonl(tmp_path / "m.jsonl", [{"id": "a", "text": "One.", "seed": 3, "noise_scale": 0.5},
                                           {"id": 7, "text": "Two.", "voice": ""}])
    rows = read_rows(j)
    assert [r.id for r in rows] == ["a", "7"] and rows[0].seed == 3 and rows[0].knobs == {"noise_scale": 0.5}
    assert rows[1].voice is None and rows[1].line == 2
    c = tmp_path / "m.csv"
    c.write_text('id,text,noise_scale,seed\na,"One, with a comma.",0.5,\nb,Two.,,9\n')
    rows = read_rows(c)
    assert rows[0].text == "One, with a comma." and rows[0].knobs == {"noise_scale": "0.5"} and rows[0].seed is None
    assert rows[1].knobs == {} and rows[1].seed == 9


def test_rows_from_plain_text_one_a_line(tmp_path):
    t = tmp_path / "lines.txt"
    t.write_text("The first line.\n\n  Third, after a blank one.  \r\n{\"id\": \"x\", \"text\": \"as text\"}\n")
    rows = read_rows(t)
    assert [(r.id, r.line, r.text) for r in rows] == [
        ("line-0001", 1, "The first line."), ("line-0003", 3, "Third, after a blank one."),
        ("line-0004", 4, '{"id": "x", "text": "as text"}')]
    assert [r.id for r in read_rows(t)] == [r.id for r in rows]     # the same file, the same ids: a re-run resumes


def test_batch_speaks_a_plain_text_file(run_cli, tmp_path):
    (tmp_path / "lines.txt").write_text("Hello there.\n\nGood night.\n")
    p = run_cli("batch", "lines.txt", "-o", "out", env={"COLUMNS": "200"})
    assert p.returncode == 0, p.err
    assert sorted((e["id"], e["text"], e["path"]) for e in entries(tmp_path / "out")) == [
        ("line-0001", "Hello there.", rel_path("line-0001", "wav")),
        ("line-0003", "Good night.", rel_path("line-0003", "wav"))]


def test_batch_help_names_the_plain_text_manifest():
    from typer.testing import CliRunner

    from ttscli.cli import app

    shown = " ".join(CliRunner().invoke(app, ["batch", "--help"], env={"COLUMNS": "200"}).output.split())
    assert ".txt, one row per non-empty line" in shown


@pytest.mark.parametrize("content,name,needle", [
    ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', "m.jsonl", "id 'a' was already used on line 1"),
    ('{"id": "a", "text": "x"}\n{oops\n', "m.jsonl", "m.jsonl:2: not valid JSON"),
    ('{"id": "../x", "text": "x"}\n', "m.jsonl", "id must be"),
    ('{"id": "a"}\n', "m.jsonl", "row 'a' has no text"),
    ('{"id": "a", "text": "x", "seed": -2}\n', "m.jsonl", "seed must be in"),
    ("text\nhello\n", "m.csv", "including id and text"),
    ("id,text\na,b,c\n", "m.csv", "more cells than columns"),
    ("", "m.jsonl", "has no rows"),
    ('{"id": "a", "text": "x"}\n', "m.xml", "name it .jsonl, .csv or .txt"),
    ("\n  \n", "m.txt", "has no rows"),
])
def test_bad_manifests_stop_before_any_work(tmp_path, content, name, needle):
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(UsageError, match=None) as e:
        read_rows(p)
    assert needle in str(e.value)


def test_seeds_and_shards_are_stable():
    assert row_seed("abc", 0) == row_seed("abc", 0) != row_seed("abc", 1)
    assert 0 <= row_seed("x", 2**32 - 1) < 2**32
    assert rel_path("abc", "wav").endswith("/abc.wav") and len(rel_path("abc", "wav").split("/")[0]) == 2


def test_run_errors_and_resume(run_cli, tmp_path):
    m = write_jsonl(tmp_path / "m.jsonl", [
        {"id": "r1", "text": "The first row."},
        {"id": "r2", "text": "The second row, seeded.", "seed": 5, "noise_scale": 0.4},
        {"id": "bad-knob", "text": "Hi.", "temperature": 1.0},
        {"id": "silent", "text": "...!"},
        {"id": "long", "text": "x" * 40_000},
    ])
    p = run_cli("batch", m, "-o", "out", "--format", "flac")
    assert p.returncode == 1 and "Traceback" not in p.err
    assert only_line(p.err.split("\n", 1)[1]).startswith("error: 3 of 5 rows failed; see")
    out = tmp_path / "out"
    es = {e["id"]: e for e in entries(out)}
    assert set(es) == {"r1", "r2"}
    for e in es.values():
        x, sr = sf.read(str(out / e["path"]), dtype="float32")
        assert sr == e["sample_rate"] == 22050 and len(x) == e["samples"] and e["model"] == "piper-joe"
        assert e["path"] == rel_path(e["id"], "flac") and e["sha256"] == file_sha256(out / e["path"])
    assert es["r2"]["seed"] == 5 and es["r1"]["seed"] == row_seed("r1", 0)
    errs = {e["id"]: e["error"] for e in map(json.loads, (out / "errors.jsonl").read_text().splitlines())}
    assert "piper-joe has no setting --temperature" in errs["bad-knob"]
    assert "nothing the voice can speak" in errs["silent"]
    assert "text is 40,000 UTF-8 bytes; the limit is 32,768 bytes" in errs["long"]
    assert not list(out.rglob("*.part"))
    # a re-run skips what is done and intact, redoes a row whose file changed or whose text changed
    (out / es["r1"]["path"]).write_bytes(b"garbage")
    rows = [json.loads(x) for x in m.read_text().splitlines()][:2]
    rows[1]["text"] = "The second row, changed."
    write_jsonl(m, rows)
    p = run_cli("batch", m, "-o", "out", "--format", "flac")
    assert p.returncode == 0, p.err
    assert "wrote 2 of 2 rows" in p.err and (out / "errors.jsonl").read_text() == ""
    again = {e["id"]: e for e in entries(out)}
    assert set(again) == {"r1", "r2"} and len(entries(out)) == 2 and again["r2"]["text"] == "The second row, changed."
    assert again["r1"]["sha256"] == es["r1"]["sha256"]  # same seed, same audio
    p = run_cli("batch", m, "-o", "out", "--format", "flac")
    assert p.returncode == 0 and "wrote 0 of 2 rows" in p.err and "2 already done" in p.err


def test_torn_manifest_line_is_dropped(run_cli, tmp_path):
    m = write_jsonl(tmp_path / "m.jsonl", [{"id": "a", "text": "Row a."}, {"id": "b", "text": "Row b."}])
    assert run_cli("batch", m, "-o", "out").returncode == 0
    mf = tmp_path / "out" / "manifest.jsonl"
    lines = mf.read_text().splitlines()
    mf.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-append
    p = run_cli("batch", m, "-o", "out")
    assert p.returncode == 0 and "wrote 1 of 2 rows" in p.err
    assert sorted(e["id"] for e in entries(tmp_path / "out")) == ["a", "b"]


@pytest.mark.slow
def test_killed_run_resumes_with_nothing_lost_or_doubled(tmp_path, shared_cache):
    """SIGKILL mid-run (no clean-up at all), then the same command: every row exactly once."""
    n = 16
    m = write_jsonl(tmp_path / "m.jsonl", [{"id": f"row{i:03d}", "text": f"Sentence number {i} of the corpus."}
                                           for i in range(n)])
    env = {**os.environ, "TTSCLI_CACHE": str(shared_cache), "HF_HUB_OFFLINE": "1"}
    cmd = ttscli_exe() + ["batch", str(m), "-o", str(tmp_path / "out"), "-q"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE)
    mf = tmp_path / "out" / "manifest.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if mf.exists() and len(mf.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stderr.read().decode()
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    first = len(entries(tmp_path / "out"))
    assert 3 <= first < n
    p = subprocess.run(cmd, env=env, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()
    es = entries(tmp_path / "out")
    assert sorted(e["id"] for e in es) == [f"row{i:03d}" for i in range(n)]
    for e in es:
        x, sr = sf.read(str(tmp_path / "out" / e["path"]), dtype="float32")
        assert len(x) == e["samples"] > 0 and np.isfinite(x).all()
    files = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*.wav"))
    assert files == sorted(e["path"] for e in es)
    assert not list((tmp_path / "out").rglob("*.part"))


def test_resume_sweeps_a_killed_writers_temp_file_beside_a_done_row(run_cli, tmp_path):
    """A writer killed after another finished the same row (a retried task) leaves its temp file
    beside a row that is done; the next run skips the row, so it sweeps the file itself."""
    m = write_jsonl(tmp_path / "m.jsonl", [{"id": "r1", "text": "One row."}])
    assert run_cli("batch", m, "-o", "out").returncode == 0
    folder = tmp_path / "out" / rel_path("r1", "wav").split("/")[0]
    dead = folder / ".r1.wav.999999999.0123456789abcdef.part"   # no process has this pid
    dead.write_bytes(b"RIFF")
    p = run_cli("batch", m, "-o", "out")
    assert p.returncode == 0 and "(1 already done, 0 failed)" in p.err, p.err
    assert not dead.exists()


def test_ctrl_c_says_how_many_rows_were_written_and_that_a_re_run_resumes(tmp_path, shared_cache):
    """Ctrl-C after some rows: the one line counts the rows kept (as the manifest lists them)."""
    n = 60
    m = write_jsonl(tmp_path / "m.jsonl", [{"id": f"row{i:03d}", "text": f"Sentence number {i} of the corpus."}
                                           for i in range(n)])
    env = {**os.environ, "TTSCLI_CACHE": str(shared_cache), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(ttscli_exe() + ["batch", "m.jsonl", "-o", "out", "-q"], cwd=tmp_path, env=env,
                            stderr=subprocess.PIPE)
    mf = tmp_path / "out" / "manifest.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if mf.exists() and len(mf.read_text().splitlines()) >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted: " + proc.stderr.read().decode()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    kept = len(entries(tmp_path / "out"))
    assert proc.returncode == 130, err
    assert 2 <= kept < n
    assert only_line(err.decode()) == (f"error: interrupted; {kept} of {n} rows written to out; "
                                       "re-run the same command to resume")
    # the same command resumes: the kept rows are not made again (the manifest cut to one row more)
    write_jsonl(m, [json.loads(x) for x in m.read_text().splitlines()][:kept + 1])
    p = subprocess.run(ttscli_exe() + ["batch", "m.jsonl", "-o", "out"], cwd=tmp_path, env=env, capture_output=True,
                       timeout=300)
    assert p.returncode == 0 and f"wrote 1 of {kept + 1} rows to out ({kept} already done" in p.stderr.decode()


def test_timestamps_put_each_rows_words_in_its_manifest_line(run_cli, tmp_path):
    from functools import partial

    from ttscli import api
    from ttscli.batch import BatchJob, ModelRef, run_batch, run_local
    from ttscli.words import input_words

    m = write_jsonl(tmp_path / "m.jsonl", [{"id": "a", "text": "Row one, with 12 words."},
                                           {"id": "b", "text": "Row two. Two sentences."}])
    job = BatchJob(manifest=m, out=tmp_path / "out", ref=ModelRef(model="piper-joe"))
    engine = partial(run_local, pipe=api.load("piper-joe"))
    assert run_batch(job, engine).written == 2
    plain = {e["id"]: e for e in entries(tmp_path / "out")}
    assert all("words" not in e for e in plain.values())
    # rows done without words are done again with them: the same audio, now timed
    p = run_cli("batch", m, "-o", "out", "--timestamps")
    assert p.returncode == 0 and "wrote 2 of 2 rows" in p.err, p.err
    timed = {e["id"]: e for e in entries(tmp_path / "out")}
    assert len(entries(tmp_path / "out")) == 2
    for i, e in timed.items():
        assert e["sha256"] == plain[i]["sha256"]
        spoken = input_words(e["text"].replace("12", "twelve"))
        assert [w["word"] for w in e["words"]] == spoken
        assert all(0 <= w["start"] <= w["end"] <= e["duration"] + 1e-3 for w in e["words"])
        assert [w["start"] for w in e["words"]] == sorted(w["start"] for w in e["words"])
    assert run_batch(job, engine).written == 0       # words kept when a later run does not ask for them
    assert all("words" in e for e in entries(tmp_path / "out"))
