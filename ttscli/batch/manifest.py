"""Batch manifests: the rows to synthesize (JSONL, CSV or plain text) and the record of what was written.

Input rows carry ``id`` and ``text`` and optionally ``voice``, ``ref_audio`` + ``ref_text``,
``instruct``, ``language``, ``seed``; any other column names a family knob. Output goes to
``DIR/<shard>/<id>.<fmt>``; ``DIR/manifest.jsonl`` gets one line per file once the file is in
place, so a run killed at any point leaves a manifest that lists only complete files, and a
re-run trusts an entry only when its file still has the recorded SHA-256 and the entry was
made for the same request.

Writers in other processes (Ray actors) also append each entry to a journal of their own,
``DIR/.journal/<writer>.jsonl``, as soon as its file is in place: a driver killed before it
recorded what they wrote loses nothing, since the next run takes the journals' intact entries
into the manifest (and then removes the journals).
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscli.errors import OutputError, UsageError, os_error
from ttscli.filehash import file_sha256

ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
FIELDS = ("id", "text", "voice", "ref_audio", "ref_text", "instruct", "language", "seed")
MANIFEST = "manifest.jsonl"
ERRORS = "errors.jsonl"
JOURNALS = ".journal"
MAX_MANIFEST_BYTES = 1 << 30


@dataclass
class Row:
    id: str
    text: str
    line: int                                # where it is in the input (1-based; CSV: data rows)
    voice: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    instruct: str | None = None
    language: str | None = None
    seed: int | None = None
    knobs: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in (*FIELDS, "line", "knobs")}


def row_seed(row_id: str, base: int) -> int:
    """A row's seed when it gives none: from its id and the run's --seed, so it does not depend
    on the row's position, the engine or which worker runs it."""
    h = int.from_bytes(hashlib.sha256(row_id.encode()).digest()[:8], "little")
    return (base + h) % (2**32)


def shard_of(row_id: str) -> str:
    """Two hex digits of the id's hash: at most 256 folders, a few thousand files in each per million rows."""
    return hashlib.sha256(row_id.encode()).hexdigest()[:2]


def rel_path(row_id: str, fmt: str) -> str:
    return f"{shard_of(row_id)}/{row_id}.{fmt}"


def _clean(value: Any) -> Any:
    return None if value is None or (isinstance(value, str) and value == "") else value


def _row(obj: dict, line: int, where: str) -> Row:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: each row must be an object with id and text")
    rid = obj.get("id")
    if isinstance(rid, int) and not isinstance(rid, bool):
        rid = str(rid)
    if not isinstance(rid, str) or not ID.match(rid):
        raise UsageError(f"{where}: id must be 1-128 letters, digits, '_', '-' or '.' (not starting with one "
                         f"of the last three), got {rid!r}")
    text = obj.get("text")
    if not isinstance(text, str):
        raise UsageError(f"{where}: row {rid!r} has no text")
    seed = _clean(obj.get("seed"))
    if seed is not None:
        try:
            if isinstance(seed, bool) or (isinstance(seed, float) and not seed.is_integer()):
                raise ValueError
            seed = int(seed)
        except (TypeError, ValueError):
            raise UsageError(f"{where}: row {rid!r}: seed must be an integer, not {seed!r}") from None
        if not 0 <= seed < 2**32:
            raise UsageError(f"{where}: row {rid!r}: seed must be in [0, 2^32), got {seed}")
    strs = {}
    for k in ("voice", "ref_audio", "ref_text", "instruct", "language"):
        v = _clean(obj.get(k))
        if v is not None and not isinstance(v, str):
            raise UsageError(f"{where}: row {rid!r}: {k} must be a string")
        strs[k] = v
    knobs = {k: v for k, v in obj.items() if k not in FIELDS and _clean(v) is not None}
    return Row(id=rid, text=text, line=line, seed=seed, knobs=knobs, **strs)


def line_id(n: int) -> str:
    """A plain-text row's id, from its line number: a re-run of the same file finds its rows done,
    and the files sort in the text's order."""
    return f"line-{n:04d}"


def read_rows(path: Path) -> list[Row]:
    """Every row of a JSONL, CSV or plain-text manifest (by extension; .jsonl/.json/.ndjson,
    .csv/.tsv, or .txt: one row per non-empty line, named by :func:`line_id`).

    Structure errors (bad JSON, no id, duplicate ids) stop the run before any work; what is
    wrong with a row's content (text too long, unknown knob, missing reference) goes to the
    errors file when that row's turn comes."""
    if not path.is_file():
        raise UsageError(f"manifest {path} does not exist")
    ext = path.suffix.lower()
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read manifest {path}: {e.strerror}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"manifest {path} is not valid UTF-8 (byte {e.start})") from None
    rows: list[Row] = []
    if ext in (".jsonl", ".ndjson", ".json"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise UsageError(f"{path}:{n}: not valid JSON ({str(e).splitlines()[0]})") from None
            rows.append(_row(obj, n, f"{path}:{n}"))
    elif ext in (".csv", ".tsv"):
        reader = csv.DictReader(io.StringIO(text), delimiter="\t" if ext == ".tsv" else ",")
        if not reader.fieldnames or "id" not in reader.fieldnames or "text" not in reader.fieldnames:
            raise UsageError(f"{path}: the first line must name the columns, including id and text")
        try:
            for obj in reader:
                n = reader.line_num
                if None in obj:
                    raise UsageError(f"{path}:{n}: more cells than columns")
                rows.append(_row(obj, n, f"{path}:{n}"))
        except csv.Error as e:
            raise UsageError(f"{path}:{reader.line_num}: {e}") from None
    elif ext == ".txt":
        rows = [Row(id=line_id(n), text=line.strip(), line=n)
                for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    else:
        raise UsageError(f"cannot tell the format of manifest {path}: name it .jsonl, .csv or .txt")
    if not rows:
        raise UsageError(f"manifest {path} has no rows")
    seen: dict[str, int] = {}
    for r in rows:
        if r.id in seen:
            raise UsageError(f"{path}:{r.line}: id {r.id!r} was already used on line {seen[r.id]}; ids name "
                             "the output files and must be unique")
        seen[r.id] = r.line
    return rows


def request_key(row: Row, model: str, fmt: str, seed: int) -> str:
    """What makes a row's audio: an entry is reused only if this is unchanged."""
    blob = json.dumps({"model": model, "fmt": fmt, "seed": seed, "text": row.text, "voice": row.voice,
                       "ref_audio": row.ref_audio, "ref_text": row.ref_text, "instruct": row.instruct,
                       "language": row.language, "knobs": row.knobs}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _read_entries(path: Path) -> tuple[list[dict], int]:
    """(the entries of a JSONL record, lines that are not one: a torn last line counts)."""
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise UsageError(f"{path} is over {MAX_MANIFEST_BYTES >> 30} GiB; is it a batch manifest?")
    raw = path.read_text("utf-8", errors="replace")
    bad = 0 if raw.endswith("\n") or not raw else 1   # a torn append: rewrite before appending again
    entries = []
    for line in raw.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            e = None
        if isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("path"), str):
            entries.append(e)
        else:
            bad += 1
    return entries, bad


def intact(out: Path, entry: dict) -> bool:
    """The entry's file is there with the recorded size and SHA-256."""
    f = out / entry["path"]
    return f.is_file() and f.stat().st_size == entry.get("bytes") and file_sha256(f) == entry.get("sha256")


def journal_files(out: Path) -> list[Path]:
    folder = out / JOURNALS
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def load_done(out: Path) -> dict[str, dict]:
    """The entries of DIR/manifest.jsonl whose files are intact (SHA-256 as recorded), by id,
    with the intact entries of the writers' journals that the manifest lacks.

    A torn last line (a run killed while appending) and entries whose files are gone or changed
    are dropped; the manifest is rewritten (atomically) to list exactly the files that are there,
    journaled ones included, and only then are the journals removed."""
    path = out / MANIFEST
    listed, dropped = _read_entries(path) if path.exists() else ([], 0)
    done: dict[str, dict] = {}
    for e in listed:
        if e["id"] in done or not intact(out, e):
            dropped += 1
            continue
        done[e["id"]] = e
    journals = journal_files(out)
    gained = 0
    for j in journals:
        for e in _read_entries(j)[0]:
            if e["id"] not in done and intact(out, e):
                done[e["id"]] = e
                gained += 1
    if dropped or gained:
        write_manifest(out, list(done.values()))
    remove_journals(journals)
    return done


def remove_journals(journals: list[Path]) -> None:
    """Remove journals whose entries the manifest now holds (and their folder, once empty)."""
    for j in journals:
        j.unlink(missing_ok=True)
    if journals:
        try:
            journals[0].parent.rmdir()
        except OSError:
            pass  # a writer still has one open, or left something else there: the folder stays


def write_manifest(out: Path, entries: list[dict]) -> None:
    """Replace DIR/manifest.jsonl with these entries, atomically: a failed write (a full disk)
    leaves the old one and no temp file."""
    path = out / MANIFEST
    tmp = out / f".{MANIFEST}.{os.getpid()}.part"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for e in entries:
                f.write(json.dumps(e, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # the write's own error is the one to report
        raise os_error(e, path) or OutputError(f"cannot write {path}: {e.strerror or e}") from None


class Appender:
    """Appends one JSON line per call and makes it durable before returning.

    A line goes in with write(2) on an O_APPEND descriptor, not through a buffer: an append that
    fails part-way (a full disk) is cut back off the file, so the file never keeps half a line,
    and there is nothing left to flush, so closing cannot fail on the data. Errors come as one
    line (:class:`OutputError`, with the errno)."""

    def __init__(self, path: Path, truncate: bool = False):
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        try:
            self.fd = os.open(path, flags, 0o666)
        except OSError as e:
            raise self._failure(e) from None

    def _failure(self, e: OSError) -> OutputError:
        return os_error(e, self.path) or OutputError(f"cannot write {self.path}: {e.strerror or e}")

    def add(self, entry: dict) -> None:
        data = memoryview((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))
        start = os.fstat(self.fd).st_size
        try:
            while data:
                data = data[os.write(self.fd, data):]
            os.fsync(self.fd)
        except BaseException as e:
            try:
                os.ftruncate(self.fd, start)
            except OSError:
                pass  # the append's own error is the one to report
            if isinstance(e, OSError):
                raise self._failure(e) from None
            raise

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


class Journal:
    """One writer's record of the entries it wrote (DIR/.journal/<pid>-<random>.jsonl): what a
    resume reads when the driver that should have put them in the manifest was killed first.
    The file is made at the first entry."""

    def __init__(self, out: Path):
        self.path = out / JOURNALS / f"{os.getpid()}-{secrets.token_hex(4)}.jsonl"
        self.appender: Appender | None = None

    def add(self, entry: dict) -> None:
        if self.appender is None:
            try:
                self.path.parent.mkdir(exist_ok=True)
            except OSError as e:
                raise os_error(e, self.path.parent) or OutputError(
                    f"cannot write {self.path.parent}: {e.strerror or e}") from None
            self.appender = Appender(self.path)
        self.appender.add(entry)


def fold_journals(out: Path, recorded: set[str], manifest: Appender) -> None:
    """Append to the manifest the journals' intact entries it lacks (rows the writers finished
    after the driver stopped taking results), then remove the journals."""
    journals = journal_files(out)
    for j in journals:
        for e in _read_entries(j)[0]:
            if e["id"] not in recorded and intact(out, e):
                manifest.add(e)
                recorded.add(e["id"])
    remove_journals(journals)
