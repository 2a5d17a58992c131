"""Batch manifests: the rows to synthesize (JSONL or CSV) and the record of what was written.

Input rows carry ``id`` and ``text`` and optionally ``voice``, ``ref_audio`` + ``ref_text``,
``instruct``, ``language``, ``seed``; any other column names a family knob. Output goes to
``DIR/<shard>/<id>.<fmt>``; ``DIR/manifest.jsonl`` gets one line per file once the file is in
place, so a run killed at any point leaves a manifest that lists only complete files, and a
re-run trusts an entry only when its file still has the recorded SHA-256 and the entry was
made for the same request.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscli.errors import UsageError
from ttscli.filehash import file_sha256

ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
FIELDS = ("id", "text", "voice", "ref_audio", "ref_text", "instruct", "language", "seed")
MANIFEST = "manifest.jsonl"
ERRORS = "errors.jsonl"
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


def read_rows(path: Path) -> list[Row]:
    """Every row of a JSONL or CSV manifest (by extension; .jsonl/.json/.ndjson or .csv/.tsv).

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
    else:
        raise UsageError(f"cannot tell the format of manifest {path}: name it .jsonl or .csv")
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


def load_done(out: Path) -> dict[str, dict]:
    """The entries of DIR/manifest.jsonl whose files are intact (SHA-256 as recorded), by id.

    A torn last line (a run killed while appending) and entries whose files are gone or changed
    are dropped, and the manifest is rewritten without them (atomically) so that it lists
    exactly the files that are there."""
    path = out / MANIFEST
    if not path.exists():
        return {}
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise UsageError(f"{path} is over {MAX_MANIFEST_BYTES >> 30} GiB; is it a batch manifest?")
    done: dict[str, dict] = {}
    raw = path.read_text("utf-8", errors="replace")
    dropped = 0 if raw.endswith("\n") or not raw else 1   # a torn append: rewrite before appending again
    for line in raw.splitlines():
        try:
            e = json.loads(line)
            ok = isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("path"), str)
        except ValueError:
            ok = False
        if not ok or e["id"] in done:
            dropped += 1
            continue
        f = out / e["path"]
        if not f.is_file() or f.stat().st_size != e.get("bytes") or file_sha256(f) != e.get("sha256"):
            dropped += 1
            continue
        done[e["id"]] = e
    if dropped:
        write_manifest(out, list(done.values()))
    return done


def write_manifest(out: Path, entries: list[dict]) -> None:
    tmp = out / f".{MANIFEST}.{os.getpid()}.part"
    with open(tmp, "w", encoding="utf-8") as f:
        for e in entries:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out / MANIFEST)


class Appender:
    """Appends one JSON line per call and makes it durable before returning."""

    def __init__(self, path: Path, truncate: bool = False):
        self.f = open(path, "w" if truncate else "a", encoding="utf-8")

    def add(self, entry: dict) -> None:
        self.f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()
