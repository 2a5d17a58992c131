#!/usr/bin/env python
"""Kill-and-resume check of `ttscli batch` (and optionally the Ray engine against the local one).

Writes an N-row manifest for the embedded voice, starts `ttscli batch`, SIGKILLs it once a
random number of rows (between 10% and 90%) are in DIR/manifest.jsonl, runs the same command
again, and checks: the manifest has exactly N rows, one per id; every file decodes with the
recorded sample count and SHA-256; no other audio files and no .part files are left. With
--ray it then runs `--engine ray` on the same manifest and seeds into a second folder and
compares it with the local output (layout, sample counts, and samples).

    .venv/bin/python scripts/batch_resume_check.py --rows 500 --out /tmp/batch-check
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

WORDS = ("river morning quiet garden window yellow engine careful distant simple letter winter "
         "station number seven bright market silver travel answer").split()


def manifest(path: Path, n: int, seed: int) -> None:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
            f.write(json.dumps({"id": f"utt{i:05d}", "text": f"Line {i}: the {words}."}) + "\n")


def entries(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]


def verify(out: Path, n: int) -> dict:
    es = entries(out)
    ids = [e["id"] for e in es]
    assert len(es) == n, f"{len(es)} manifest rows, expected {n}"
    assert len(set(ids)) == n, "duplicate ids in the manifest"
    import hashlib

    audio = 0.0
    for e in es:
        p = out / e["path"]
        x, sr = sf.read(str(p), dtype="float32")
        assert len(x) == e["samples"] and sr == e["sample_rate"], e["id"]
        assert hashlib.sha256(p.read_bytes()).hexdigest() == e["sha256"], e["id"]
        audio += len(x) / sr
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.suffix == ".wav"}
    assert files == {e["path"] for e in es}, "audio files that the manifest does not list"
    assert not list(out.rglob("*.part")), ".part files left"
    return {"rows": n, "audio_s": round(audio, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--out", type=Path, default=Path("/tmp/ttscli-batch-check"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ray", action="store_true", help="also run --engine ray and compare")
    ap.add_argument("--time-limit", type=float, default=3600.0)
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("ttscli"))
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    m = args.out / "rows.jsonl"
    manifest(m, args.rows, args.seed)
    local = args.out / "local"
    cmd = [exe, "batch", str(m), "-o", str(local), "--seed", str(args.seed), "-q"]
    kill_at = random.Random(args.seed).randint(args.rows // 10, args.rows * 9 // 10)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + args.time_limit
    done = 0
    while proc.poll() is None and time.monotonic() < deadline:
        mf = local / "manifest.jsonl"
        done = len(mf.read_text().splitlines()) if mf.exists() else 0
        if done >= kill_at:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    first_s = time.perf_counter() - t0
    killed_with = len(entries(local))
    t1 = time.perf_counter()
    p = subprocess.run(cmd, timeout=args.time_limit, check=False)
    resume_s = time.perf_counter() - t1
    if p.returncode != 0:
        print(f"the resumed run failed with exit {p.returncode}")
        return 1
    report = {"rows": args.rows, "killed_after_rows": killed_with, "first_run_s": round(first_s, 1),
              "resumed_run_s": round(resume_s, 1), "resumed_rows": args.rows - killed_with,
              "rows_per_s_resumed": round((args.rows - killed_with) / resume_s, 2), **verify(local, args.rows)}
    if args.ray:
        ray_out = args.out / "ray"
        t2 = time.perf_counter()
        p = subprocess.run([exe, "batch", str(m), "-o", str(ray_out), "--seed", str(args.seed), "-q",
                            "--engine", "ray", "--ray-workers", "2"], timeout=args.time_limit, check=False)
        if p.returncode != 0:
            print(f"the Ray run failed with exit {p.returncode}")
            return 1
        verify(ray_out, args.rows)
        a = {e["id"]: e for e in entries(local)}
        b = {e["id"]: e for e in entries(ray_out)}
        same_bytes = worst = 0
        for i, e in a.items():
            f = b[i]
            assert (e["path"], e["samples"], e["seed"]) == (f["path"], f["samples"], f["seed"]), i
            same_bytes += e["sha256"] == f["sha256"]
            x, _ = sf.read(str(local / e["path"]), dtype="int16")
            y, _ = sf.read(str(ray_out / f["path"]), dtype="int16")
            worst = max(worst, int(np.abs(x.astype(np.int32) - y).max()))
        report.update(ray_s=round(time.perf_counter() - t2, 1), ray_identical_files=same_bytes,
                      ray_max_sample_diff=worst)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
