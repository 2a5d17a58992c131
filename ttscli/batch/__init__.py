"""`ttscli batch MANIFEST -o DIR`: resumable corpus synthesis (manifest.py has the file formats).

The driver reads the rows, keeps the entries of DIR/manifest.jsonl whose files are intact, and
hands the rest to an engine: ``local`` (this process, one model) or ``ray`` (ray_engine.py, one
model per actor). Both write each row with :func:`write_row`, so their output is laid out the
same way and made by the same code. A row that fails goes to DIR/errors.jsonl and the run goes
on; files are written atomically and recorded only once in place. A full disk is different: it
would fail every row after it, so the run stops at the first (:func:`stop_error`).
"""
from __future__ import annotations

import errno
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscli.audio_formats import FORMATS as ENCODER_FORMATS
from ttscli.batch.manifest import (
    ERRORS,
    MANIFEST,
    Appender,
    Row,
    fold_journals,
    load_done,
    read_rows,
    rel_path,
    request_key,
    row_seed,
)
from ttscli.errors import OutputError, TTSError, UsageError, os_error
from ttscli.filehash import file_sha256

FORMATS = tuple(ENCODER_FORMATS)   # every format ttscli writes (ttscli.encode)
# no room left (disk, quota) or no writes at all: every row after the first would fail the same way
STOP_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


@dataclass
class ModelRef:
    """How to load the model, in this process or in a Ray actor (picklable: no pipeline in it)."""

    model: str                               # registry id
    model_dir: Path | None = None
    registry_files: list[Path] = field(default_factory=list)
    # component -> backend asked for; the others get their defaults where the model loads (a Ray
    # actor's machine may differ from the driver's)
    backends: dict[str, str] = field(default_factory=dict)
    dtype: str | None = None

    def load(self):
        from ttscli import api
        from ttscli.models.base import LoadOptions
        from ttscli.registry import load_registry

        reg = load_registry(self.registry_files)
        return api.load(self.model, model_dir=self.model_dir, registry=reg,
                        options=LoadOptions(dtype=self.dtype, backends=dict(self.backends)))


@dataclass
class BatchJob:
    manifest: Path
    out: Path
    ref: ModelRef
    fmt: str = "wav"
    seed: int = 0                            # the base of rows' derived seeds
    max_batch: int = 16                      # rows generated at once where the family batches
    timestamps: bool = False                 # each entry gets its row's words and their times

    @property
    def base_dir(self) -> Path:
        """Relative voice/reference paths in the manifest are relative to its folder."""
        return self.manifest.resolve().parent


def seed_of(row: Row, job: BatchJob) -> int:
    return row.seed if row.seed is not None else row_seed(row.id, job.seed)


def _path_field(value: str, job: BatchJob) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else job.base_dir / p


def build_request(pipe, row: Row, job: BatchJob):
    """The row as a checked library Request (the CLI's checks and messages)."""
    from ttscli.audio import read_reference, resample
    from ttscli.generate import Request, check_request, needs_ref_text
    from ttscli.models import family_of
    from ttscli.text import check_text

    spec = pipe.spec
    family = family_of(spec)
    text = check_text(row.text)
    instruct = check_text(row.instruct, "--instruct") if row.instruct else None
    voice = row.voice
    if voice and voice.endswith(".safetensors"):
        voice = str(_path_field(voice, job))
    req = Request(text=text, voice=voice, instruct=instruct, language=row.language, seed=seed_of(row, job),
                  knobs=dict(row.knobs))
    if row.ref_audio:
        if not spec.can("clone"):
            raise UsageError(f"{spec.id} cannot clone voices; pick a model with clone support (see `ttscli models`)")
        knobs = family.check_knobs(row.knobs, spec.id)
        if row.ref_text is None and needs_ref_text(family, knobs):
            raise UsageError("give ref_text (the reference transcript) for in-context cloning, or x_vector_only")
        mono, sr = read_reference(_path_field(row.ref_audio, job),
                                  max_seconds=float(spec.defaults.get("max_ref_seconds", 30.0)))
        rate = pipe.ref_sample_rate or sr
        req.ref_audio, req.ref_sample_rate = resample(mono, sr, rate), rate
        req.ref_text = check_text(row.ref_text, "ref_text") if row.ref_text else None
    elif row.ref_text:
        raise UsageError("ref_text goes with ref_audio (the reference recording)")
    return check_request(spec, family, req)


def write_row(pipe, row: Row, job: BatchJob, aligner=None) -> dict:
    """Synthesize one row into DIR/<shard>/<id>.<fmt> (atomically); its manifest entry. With
    ``job.timestamps`` the entry has the row's words (:func:`ttscli.generate.synthesize_words`;
    ``aligner`` for a model without durations, loaded once by the caller)."""
    from ttscli.generate import synthesize, synthesize_words

    req = build_request(pipe, row, job)
    if not job.timestamps:
        return write_audio(pipe, row, job, req, synthesize(pipe, req))
    words: list = []

    def audio():
        for chunk in synthesize_words(pipe, req, aligner=aligner):
            words.extend(chunk.words)
            yield chunk.audio

    entry = write_audio(pipe, row, job, req, audio())
    return {**entry, "words": [w.as_dict() for w in words]}


def write_audio(pipe, row: Row, job: BatchJob, req, audio) -> dict:
    """Audio chunks of a row into its file (renamed into place only when complete); its entry."""
    from ttscli.audio import FileSink
    from ttscli.generate import write_all

    rel = rel_path(row.id, job.fmt)
    path = job.out / rel
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise os_error(e, path.parent) or OutputError(f"cannot write {path.parent}: {e.strerror or e}") from None
    n = write_all(audio, FileSink(path, pipe.sample_rate, job.fmt))
    return {"id": row.id, "path": rel, "duration": round(n / pipe.sample_rate, 4), "samples": n,
            "sample_rate": pipe.sample_rate, "model": pipe.spec.id, "seed": req.seed, "text": row.text,
            "bytes": path.stat().st_size, "sha256": file_sha256(path),
            "key": request_key(row, pipe.spec.id, job.fmt, req.seed)}


def error_entry(row: Row, e: BaseException) -> dict:
    msg = str(e) if isinstance(e, TTSError) else f"internal error: {type(e).__name__}: {e}"
    return {"id": row.id, "line": row.line, "error": msg}


def stop_error(e: BaseException) -> OutputError | None:
    """The one-line error that ends the run, or None for a failure of this row only: a full disk,
    a quota reached or a read-only file system would fail every row after it, so the run stops
    at the first rather than synthesizing rows it cannot keep."""
    if isinstance(e, OutputError):
        return e if e.errno in STOP_ERRNOS else None
    if isinstance(e, OSError) and e.errno in STOP_ERRNOS:
        return os_error(e)
    return None


def row_failure(row: Row, e: Exception) -> tuple[bool, dict]:
    """(False, error entry) for the errors file; raises instead when the error ends the run."""
    stop = stop_error(e)
    if stop is not None:
        raise stop from None
    return False, error_entry(row, e)


def attempt(pipe, row: Row, job: BatchJob, aligner=None) -> tuple[bool, dict]:
    """(True, entry) or (False, error entry): one row's failure does not stop the run."""
    try:
        return True, write_row(pipe, row, job, aligner)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as e:  # noqa: BLE001 - one row's failure does not stop the run: recorded in the errors file
        return row_failure(row, e)


def batched_synthesis(pipe):
    """The engine's ``synthesize_many`` (ttscli.batching: several requests as rows of one batch)
    when the pipeline generates rows (``Pipeline.rows()``); else None (rows go one at a time)."""
    if pipe.rows() is None:
        return None
    from ttscli.batching import synthesize_many

    return synthesize_many


def run_local(pending: list[Row], job: BatchJob, pipe=None, aligner=None) -> Iterator[tuple[bool, dict]]:
    """This process, one model: rows through the family's batched generator (continuous
    batching, up to ``job.max_batch`` rows at once), else one at a time in manifest order. With
    ``job.timestamps`` rows go one at a time: the batched generator yields no words; a model
    without durations has them from ``aligner`` (None: :func:`job_aligner`'s, loaded here)."""
    pipe = pipe or job.ref.load()
    many = batched_synthesis(pipe) if job.max_batch > 1 and not job.timestamps else None
    if many is None:
        aligner = aligner or (job_aligner(pipe, job) if pending else None)
        for row in pending:
            yield attempt(pipe, row, job, aligner)
            pipe.clear_cache()
        return
    failed: list[tuple[bool, dict]] = []
    rows: dict[int, tuple[Row, Any]] = {}

    def requests():
        for k, row in enumerate(pending):
            try:
                req = build_request(pipe, row, job)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - one row's failure never stops the run: recorded in the errors file
                failed.append((False, error_entry(row, e)))
                continue
            rows[k] = (row, req)
            yield k, req

    for k, out in many(pipe, requests(), max_batch=job.max_batch):
        yield from _pop_all(failed)
        row, req = rows.pop(k)
        if isinstance(out, BaseException):
            yield False, error_entry(row, out)
            continue
        try:
            result = True, write_audio(pipe, row, job, req, [out])
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - one row's failure does not stop the run: recorded in the errors file
            result = row_failure(row, e)
        yield result
    yield from _pop_all(failed)


def job_aligner(pipe, job: BatchJob):
    """The forced aligner rows need for their words (:func:`ttscli.words.default_aligner`), or
    None: no words wanted, or the model's own durations give them. Loaded once per model: each
    row's own would load the recognizer again."""
    if not job.timestamps or pipe.word_durations:
        return None
    from ttscli.words import default_aligner

    return default_aligner()


def _pop_all(items: list):
    while items:
        yield items.pop(0)


@dataclass
class Summary:
    """What a run did; filled in as rows finish, so a stopped run's caller can say what it kept."""

    total: int = 0
    skipped: int = 0                         # rows already done by an earlier run
    written: int = 0
    failed: int = 0
    audio_s: float = 0.0
    wall_s: float = 0.0


def plan(job: BatchJob) -> tuple[list[Row], dict[str, dict], list[Row]]:
    """(all rows, intact entries kept, rows still to do)."""
    if job.fmt not in FORMATS:
        raise UsageError(f"unknown --format {job.fmt}; use one of {', '.join(FORMATS)}")
    from ttscli.audio import check_format_supported

    check_format_supported(job.fmt)
    rows = read_rows(job.manifest)
    if job.out.exists() and not job.out.is_dir():
        raise UsageError(f"output {job.out} is a file; give a folder")
    job.out.mkdir(parents=True, exist_ok=True)
    done = load_done(job.out)
    todo = []
    for r in rows:
        e = done.get(r.id)
        # a row done without words is done again when they are wanted (the same audio, now timed)
        if (e is None or e.get("key") != request_key(r, job.ref.model, job.fmt, seed_of(r, job))
                or (job.timestamps and "words" not in e)):
            todo.append(r)
        else:
            sweep_stale_parts(job.out, rel_path(r.id, job.fmt))
    return rows, done, todo


def sweep_stale_parts(out: Path, rel: str) -> None:
    """Remove the temp files a killed writer left beside a row that is already done (a row is
    written again only when it is not, and that write sweeps its own): the shard folder opened
    without following a link planted in its place."""
    import os

    from ttscli.outfile import remove_stale_parts

    shard, name = rel.rsplit("/", 1)
    try:
        fd = os.open(out / shard, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        remove_stale_parts(fd, name)
    finally:
        os.close(fd)


def run_batch(job: BatchJob, engine: Callable[[list[Row], BatchJob], Iterator[tuple[bool, dict]]] = run_local,
              on_row: Callable[[bool, dict], None] | None = None,
              on_start: Callable[[int, int], None] | None = None, summary: Summary | None = None) -> Summary:
    """Run every row not already done; the manifest and errors file are appended as rows finish.

    An error that ends the run (a full disk, Ctrl-C) leaves the manifest listing exactly the
    complete files recorded so far, and is the error that comes out: a failure in the cleanup
    after it (stopping the engine, closing the files) does not replace it. ``summary``, when
    given, is the one filled in, so the caller still knows what was written when an error ends
    the run."""
    rows, done, todo = plan(job)
    summary = summary if summary is not None else Summary()
    summary.total, summary.skipped = len(rows), len(rows) - len(todo)
    if on_start:
        on_start(summary.total, summary.skipped)
    ids = {r.id for r in rows}
    redo = {r.id for r in todo}
    if any(i in done for i in redo) or any(i not in ids for i in done):
        # entries for changed rows (and rows no longer in the manifest) go: the manifest lists
        # exactly the current rows' files
        from ttscli.batch.manifest import write_manifest

        write_manifest(job.out, [e for i, e in done.items() if i in ids and i not in redo])
    recorded = {i for i in done if i in ids and i not in redo}
    manifest = Appender(job.out / MANIFEST)
    try:
        errors = Appender(job.out / ERRORS, truncate=True)
    except BaseException:
        manifest.close()
        raise
    t0 = time.perf_counter()
    results = iter(engine(todo, job) if todo else ())
    try:
        for ok, entry in results:
            if ok:
                if entry["id"] in recorded:  # an engine that retried a row: record it once
                    continue
                recorded.add(entry["id"])
                manifest.add(entry)
                summary.written += 1
                summary.audio_s += entry["duration"]
            else:
                errors.add(entry)
                summary.failed += 1
            if on_row:
                on_row(ok, entry)
    except BaseException:
        _clean_up(results, job, recorded, manifest, errors, failing=True)
        raise
    else:
        _clean_up(results, job, recorded, manifest, errors, failing=False)
    finally:
        # rows the writers journaled after the driver stopped taking results were folded in
        summary.written = len(recorded) - summary.skipped
        summary.wall_s = time.perf_counter() - t0
    return summary


def _clean_up(results: Iterator, job: BatchJob, recorded: set[str], manifest: Appender, errors: Appender,
              failing: bool) -> None:
    """Stop the engine (a Ray cluster shuts down), record what its writers journaled that did not
    come back, close the files (a journal left behind by a failed step is read by the next run)."""
    finish([getattr(results, "close", lambda: None), lambda: fold_journals(job.out, recorded, manifest),
            manifest.close, errors.close], failing)


def finish(steps: list[Callable[[], Any]], failing: bool) -> None:
    """Run every cleanup step. While an error is on its way out (``failing``), a step's own failure
    is dropped so that it cannot take that error's place; else the first one is raised after all
    steps ran."""
    first: Exception | None = None
    for step in steps:
        try:
            step()
        except Exception as e:  # noqa: BLE001 - every cleanup step runs; the first failure is raised after them
            first = first or e
    if first is not None and not failing:
        raise first


def progress(console):
    """A rich progress bar with rows/s and audio-seconds/s; returns (context, on_start, on_row)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    prog = Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    TextColumn("{task.fields[failed]}"), console=console, transient=True)
    task = prog.add_task("batch", total=None, rate="", failed="")
    t0 = time.perf_counter()
    state = {"rows": 0, "audio": 0.0, "failed": 0}

    def on_start(total: int, skipped: int) -> None:
        prog.update(task, total=total, completed=skipped)

    def on_row(ok: bool, entry: dict[str, Any]) -> None:
        state["rows"] += 1
        if ok:
            state["audio"] += entry["duration"]
        else:
            state["failed"] += 1
        dt = max(time.perf_counter() - t0, 1e-9)
        prog.update(task, advance=1, rate=f"{state['rows'] / dt:.2f} rows/s, {state['audio'] / dt:.2f} audio s/s",
                    failed=f"{state['failed']} failed" if state["failed"] else "")

    return prog, on_start, on_row
