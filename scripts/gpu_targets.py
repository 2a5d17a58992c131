#!/usr/bin/env python
"""Every speed target in one go, one JSON out: run on the GPU machine from the source tree.

The steps, each a command whose JSON is gathered under its name (random weights at the real
dimensions everywhere, so nothing is downloaded):

  qwen3_batched        ttscli bench qwen3-tts-0.6b-base --random-weights --batch 1,4,16,64
  qwen3_vs_mlx_audio   benchmarks/bench_qwen3_peer.py --batch 1,4,16,64 (needs mlx-audio: --peer-python)
  qwen3_single_stream  ttscli bench qwen3-tts-0.6b-base --random-weights --stream
  breeze_default       ttscli bench breeze-tts-2 --random-weights (its default dtype, bfloat16)
  breeze_float32       ttscli bench breeze-tts-2 --random-weights --dtype float32
  chatterbox_stream    ttscli bench chatterbox --random-weights --stream
  serve_load           benchmarks/serve_load.py -m qwen3-tts-0.6b-base --random-weights (1, 8, 32, 64 clients)
  cosyvoice3_stream    ttscli bench cosyvoice3 --random-weights --stream
  voxcpm2_stream       ttscli bench voxcpm2 --random-weights --stream
  indextts2_stream     ttscli bench indextts2 --random-weights --stream
  indextts2_batched    ttscli bench indextts2 --random-weights --batch 1,4,16,64

The new families' streamed steps are checked against their issues' GPU targets (first audio and
real-time factor, ``family_targets`` in the JSON).

A step that cannot run here is skipped with its reason (mlx-audio not importable); a step that
fails keeps its exit status and the end of its stderr, and the others still run. The JSON file is
rewritten after every step, so a run cut short keeps what it finished. ``--quick`` runs the same
steps at toy sizes (batches 1 and 2, 4 frames, one repeat, 1 and 2 clients): a dry run that
proves the whole chain on a CPU; its figures mean nothing.

Needs only ttscli importable: the children get this checkout on PYTHONPATH and run ttscli as
``python -c 'from ttscli.cli import main'``, so no install and no console script.

    python3 scripts/gpu_targets.py --json gpu_targets.json
    python3 scripts/gpu_targets.py --quick --only serve_load,breeze_float32 --json /tmp/dry.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TTSCLI = ["-c", "import sys; from ttscli.cli import main; sys.exit(main())"]
QWEN3 = "qwen3-tts-0.6b-base"
STDERR_TAIL = 2000           # characters of a failed step's stderr kept in the report
# the served targets (issue 37): at 32 clients p95 first audio and errors; at 64, aggregate audio-s/s
SERVED_P95_FIRST_AUDIO_S = 0.100
SERVED_AUDIO_S_PER_S = 500.0
# the new families' GPU targets (issues 32, 33, 34): streamed first audio (s) and real-time factor
FAMILY_TARGETS = {"cosyvoice3_stream": {"first_audio_s": 0.150},
                  "voxcpm2_stream": {"first_audio_s": 0.150, "rtf": 0.1},
                  "indextts2_stream": {"first_audio_s": 0.200, "rtf": 0.15}}


@dataclass
class Sizes:
    """How big each step runs: the targets' sizes, or toy ones for a dry run."""

    batches: str = "1,4,16,64"
    bench_args: tuple[str, ...] = ()          # repeats and frames for `ttscli bench`
    peer_args: tuple[str, ...] = ()
    concurrency: str = "1,8,32,64"
    requests: int = 4
    served_frames: int = 100                  # 8 s of audio a request at 12.5 frames/s


FULL = Sizes()
QUICK = Sizes(batches="1,2", bench_args=("-n", "1", "--warmup", "0", "--max-frames", "4"),
              peer_args=("--frames", "4", "--rounds", "1"), concurrency="1,2", requests=1, served_frames=4)


@dataclass
class Step:
    """One command; its JSON comes from stdout, or from the file it writes (``json_file``)."""

    name: str
    argv: list[str]
    python: str = sys.executable
    json_file: Path | None = None
    needs: str = ""                           # modules ``python`` must import, comma-separated
    why_needed: str = ""                      # what to do when they do not import
    shown: str = ""                           # the command as a person types it

    def skip(self) -> str | None:
        """Why it cannot run here (a module it needs does not import), or None; probed only for
        a step that is about to run."""
        why = self.needs and missing(self.python, self.needs)
        return why and f"{self.needs} not importable by {self.python} ({why}): {self.why_needed}"


def bench(name: str, sz: Sizes, *args: str) -> Step:
    argv = ["bench", *args, "--random-weights", *sz.bench_args, "--json"]
    return Step(name, TTSCLI + argv, shown="ttscli " + " ".join(argv))


def missing(python: str, modules: str) -> str | None:
    """The import error of ``modules`` (comma-separated) in ``python``, None when they import."""
    p = subprocess.run([python, "-c", f"import {modules}"], capture_output=True, text=True, env=child_env())
    return None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["import failed"])[-1]


def peer_step(sz: Sizes, python: str) -> Step:
    script = ["benchmarks/bench_qwen3_peer.py", "--batch", sz.batches, *sz.peer_args]
    return Step("qwen3_vs_mlx_audio", script, python=python, needs="mlx_audio",
                why_needed="install mlx-audio==0.6.2 in a scratch venv (benchmarks/README.md) and pass its "
                           "python as --peer-python", shown=f"{python} " + " ".join(script))


def serve_step(sz: Sizes, out: Path) -> Step:
    argv = ["benchmarks/serve_load.py", "-m", QWEN3, "--random-weights", "--max-frames", str(sz.served_frames),
            "--concurrency", sz.concurrency, "--requests", str(sz.requests), "--json", str(out)]
    return Step("serve_load", argv, json_file=out, needs="fastapi, uvicorn, httpx",
                why_needed="the server and its load tester need them (pip install 'ttscli[serve]' httpx)",
                shown="python " + " ".join(argv))


def steps(sz: Sizes, peer_python: str, scratch: Path) -> list[Step]:
    return [bench("qwen3_batched", sz, QWEN3, "--batch", sz.batches),
            peer_step(sz, peer_python),
            bench("qwen3_single_stream", sz, QWEN3, "--stream"),
            bench("breeze_default", sz, "breeze-tts-2"),
            bench("breeze_float32", sz, "breeze-tts-2", "--dtype", "float32"),
            bench("chatterbox_stream", sz, "chatterbox", "--stream"),
            serve_step(sz, scratch / "serve_load.json"),
            bench("cosyvoice3_stream", sz, "cosyvoice3", "--stream"),
            bench("voxcpm2_stream", sz, "voxcpm2", "--stream"),
            bench("indextts2_stream", sz, "indextts2", "--stream"),
            bench("indextts2_batched", sz, "indextts2", "--batch", sz.batches)]


def family_checks(name: str, result: dict | None) -> dict:
    """A streamed family step's figures against its issue's targets (the bench's one variant)."""
    targets = FAMILY_TARGETS.get(name)
    variants = list(((result or {}).get("variants") or {}).values())
    if not targets or not variants:
        return {}
    fig = variants[0]
    return {k: {"value": fig.get(k), "target": t, "met": fig.get(k) is not None and fig[k] <= t}
            for k, t in targets.items()}


def child_env() -> dict[str, str]:
    """This checkout first on PYTHONPATH: the children import the code this script came with."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def last_json(text: str):
    """The last JSON object in a command's output: the whole text, or the tail from the last line
    that opens one (a script may print progress lines before its report)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("{"):
            try:
                return json.loads("\n".join(lines[i:]))
            except json.JSONDecodeError:
                continue
    return None


def run_step(step: Step, timeout: float) -> dict:
    out = {"command": step.shown}
    skip = step.skip()
    if skip:
        return {**out, "skipped": skip}
    t0 = time.perf_counter()
    try:
        p = subprocess.run([step.python, *step.argv], cwd=ROOT, env=child_env(), capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**out, "rc": None, "wall_s": time.perf_counter() - t0, "error": f"ran past {timeout:.0f} s"}
    out.update(rc=p.returncode, wall_s=time.perf_counter() - t0)
    if step.json_file is not None and step.json_file.exists():
        out["result"] = json.loads(step.json_file.read_text())
    else:
        out["result"] = last_json(p.stdout)
    if p.returncode != 0 or out["result"] is None:
        out["stderr_tail"] = p.stderr[-STDERR_TAIL:]
    return out


def served_checks(result: dict | None) -> dict:
    """The served targets, where the load test reached their client counts."""
    levels = {lv["clients"]: lv for lv in (result or {}).get("levels", [])}
    checks = {}
    if 32 in levels:
        lv = levels[32]
        p95 = lv["first_audio_p95_s"]
        checks["32_clients_p95_first_audio"] = {"value_s": p95, "target_s": SERVED_P95_FIRST_AUDIO_S,
                                                "errors": lv["errors"],
                                                "met": p95 is not None and p95 <= SERVED_P95_FIRST_AUDIO_S
                                                and lv["errors"] == 0}
    if 64 in levels:
        rate = levels[64]["audio_s_per_s"]
        checks["64_clients_audio_s_per_s"] = {"value": rate, "target": SERVED_AUDIO_S_PER_S,
                                              "met": rate is not None and rate >= SERVED_AUDIO_S_PER_S}
    return checks


def environment() -> dict:
    probe = ("import json, mlx.core as mx; "
             "print(json.dumps({'mlx': mx.__version__, 'device': str(mx.default_device())}))")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=child_env())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {"commit": commit.stdout.strip() or None, "python": sys.version.split()[0],
            "platform": platform.platform(), "cpu_count": os.cpu_count(),
            **(json.loads(p.stdout) if p.returncode == 0 else {"mlx": None})}


def parse_args(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path, required=True, help="the report, rewritten after every step")
    ap.add_argument("--quick", action="store_true", help="toy sizes: a dry run of the whole chain")
    ap.add_argument("--only", default=None, help="step names, comma-separated (default: all)")
    ap.add_argument("--peer-python", default=sys.executable, help="a python that imports mlx-audio and ttscli")
    ap.add_argument("--step-timeout", type=float, default=1800.0, help="seconds for one step")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sz = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory(prefix="gpu-targets-") as scratch:
        chosen = steps(sz, args.peer_python, Path(scratch))
        names = [s.name for s in chosen]
        wanted = args.only.split(",") if args.only else names
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            raise SystemExit(f"--only: no step {unknown[0]!r}; the steps: {', '.join(names)}")
        report = {"quick": args.quick, "environment": environment(), "steps": {}}
        for step in (s for s in chosen if s.name in wanted):
            print(f"{step.name}: {step.shown}", file=sys.stderr, flush=True)
            report["steps"][step.name] = res = run_step(step, args.step_timeout)
            print(f"{step.name}: " + (f"skipped ({res['skipped']})" if "skipped" in res
                                      else f"rc {res['rc']}, {res['wall_s']:.1f} s"), file=sys.stderr, flush=True)
            if step.name == "serve_load":
                report["served_targets"] = served_checks(res.get("result"))
            if step.name in FAMILY_TARGETS:
                report.setdefault("family_targets", {})[step.name] = family_checks(step.name, res.get("result"))
            args.json.write_text(json.dumps(report, indent=2))
    failed = [n for n, r in report["steps"].items() if "skipped" not in r and (r["rc"] != 0 or r["result"] is None)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
