"""`ttscli batch` on a full disk: it stops at the first "disk full" with one line naming the path,
the manifest lists exactly the complete files, a resume on a roomier disk finishes the rest, and
no failure in the cleanup takes the place of the error."""
from __future__ import annotations

import errno
import functools
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from clitools import only_line
from smalldisk import fill, grow, small_disk

from ttscli.batch import BatchJob, ModelRef, run_batch, run_local
from ttscli.batch.manifest import Appender, load_done
from ttscli.errors import OutputError
from ttscli.filehash import file_sha256


def manifest_entries(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_full_disk_stops_at_the_first_row_it_cannot_write_and_resumes(run_cli, tmp_path):
    n = 40
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"id": f"r{i:02d}", "text": f"Row number {i} is a sentence for a full disk."})
                         + "\n" for i in range(n)))
    with small_disk(tmp_path / "disk", "200k") as disk:
        out = disk / "out"
        p = run_cli("batch", m, "-o", out, "-q")
        assert p.returncode == 1, p.err
        line = only_line(p.err)
        es = manifest_entries(out)
        k = len(es)
        assert k < n // 4, f"{k} of {n} rows written on a 200 KB disk"
        # rows go in manifest order: the one named is the first not written, and nothing after it was tried
        assert [e["id"] for e in es] == [f"r{i:02d}" for i in range(k)]
        failed = f"r{k:02d}"
        assert line.startswith("error: cannot write ") and "the disk is full" in line, line
        assert f"/{failed}.wav" in line or "manifest.jsonl" in line, line
        assert (out / "errors.jsonl").read_text() == ""
        for e in es:  # every recorded file is there, complete
            assert file_sha256(out / e["path"]) == e["sha256"] and (out / e["path"]).stat().st_size == e["bytes"]
        assert not [f for f in out.rglob("*") if f.name.endswith(".part")]

        grow(disk, "20m")
        p = run_cli("batch", m, "-o", out, "-q")
        assert p.returncode == 0, p.err
        assert sorted(e["id"] for e in manifest_entries(out)) == [f"r{i:02d}" for i in range(n)]
        assert load_done(out).keys() == {f"r{i:02d}" for i in range(n)}


def test_a_failed_manifest_append_leaves_no_half_line(tmp_path):
    """The disk fills in the middle of a manifest line: the line is cut back off, the file parses."""
    with small_disk(tmp_path / "disk", "64k") as disk:
        mf = disk / "manifest.jsonl"
        first = {"id": "a", "path": "00/a.wav", "pad": "x" * 3000}
        app = Appender(mf)
        app.add(first)
        fill(disk)
        with pytest.raises(OutputError, match="the disk is full") as e:
            app.add({"id": "b", "path": "00/b.wav", "pad": "y" * 3000})  # starts in the last page's free bytes
        assert e.value.errno == errno.ENOSPC and str(mf) in str(e.value)
        app.close()
        assert [json.loads(x) for x in mf.read_text().splitlines()] == [first]
        assert mf.read_text().endswith("\n")


def rows_file(tmp_path: Path, n: int) -> Path:
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"id": f"c{i}", "text": "Hello."}) + "\n" for i in range(n)))
    return m


def test_disk_full_on_the_write_path_stops_the_run(tmp_path, monkeypatch):
    """An OSError(ENOSPC) where a row's file is written ends the run with one line naming the
    path, and no row after it is tried (none goes to the errors file)."""
    job = BatchJob(manifest=rows_file(tmp_path, 3), out=tmp_path / "out", ref=ModelRef(model="piper-joe"),
                   max_batch=1)
    target = job.out / "ab" / "c0.wav"
    tried = []

    def write_row(pipe, row, job, aligner=None):
        tried.append(row.id)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    monkeypatch.setattr("ttscli.batch.write_row", write_row)
    with pytest.raises(OutputError) as e:
        run_batch(job, functools.partial(run_local, pipe=SimpleNamespace(clear_cache=lambda: None)))
    assert str(e.value) == f"cannot write {target}: the disk is full (No space left on device)"
    assert tried == ["c0"] and (job.out / "errors.jsonl").read_text() == ""


def test_the_disk_full_error_is_not_masked_by_a_failing_cleanup(tmp_path, monkeypatch):
    """The disk fills while a row is written, so the manifest cannot take its line: that error
    comes out, though stopping the engine (as ray.shutdown() could) and closing the files fail
    after it."""
    real_close = Appender.close

    def failing_close(self):
        real_close(self)
        raise OSError(errno.EIO, "close failed")

    def engine(rows, job):
        try:
            (job.out / "c0.wav").write_bytes(b"RIFF")
            fill(job.out)
            yield True, {"id": "c0", "path": "c0.wav", "duration": 0.1, "bytes": 4, "sha256": ""}
        finally:
            raise RuntimeError("the engine failed to stop")

    monkeypatch.setattr(Appender, "close", failing_close)
    with small_disk(tmp_path / "disk", "64k") as disk:
        job = BatchJob(manifest=rows_file(tmp_path, 1), out=disk, ref=ModelRef(model="piper-joe"))
        with pytest.raises(OutputError) as e:
            run_batch(job, engine)
        assert str(e.value) == f"cannot write {disk / 'manifest.jsonl'}: the disk is full (No space left on device)"
        assert (disk / "manifest.jsonl").read_text() == ""
