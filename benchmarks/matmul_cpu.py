"""float32 ``[M, K] @ [K, N]`` on the CPU: MLX under each BLAS ttscli can preload, beside numpy
and torch, on the same shapes in one run.

Each side runs in a fresh interpreter; the MLX ones import ttscli first (the project's own import
path, so ``ttscli._blas`` preloads the BLAS asked for with ``TTSCLI_BLAS`` before mlx loads). The
sides are run round-robin ``--rounds`` times and each cell keeps its fastest wall time, with the
process CPU time of that same call beside it (on a shared machine the CPU time says what the work
costs, the wall time what a user waits). Both layouts of the weight are timed: ``x @ w`` with
``w [K, N]``, and ``x @ w.T`` with ``w [N, K]`` (nn.Linear's layout).

    .venv/bin/python benchmarks/matmul_cpu.py --rows 1,4,16,44,128 --threads 2 \
        --torch-python /path/to/python-with-torch
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
cfg = json.loads(sys.argv[1])
side, rows, K, N, reps = cfg["side"], cfg["rows"], cfg["k"], cfg["n"], cfg["reps"]
if side.startswith("mlx"):
    import ttscli  # noqa: F401  (first: the BLAS preload must come before mlx)
    from ttscli import _blas
    import mlx.core as mx
    if cfg["threads"]:
        _blas.set_num_threads(cfg["threads"])
    what = _blas.name()
    array = lambda a: mx.array(a)
    run = lambda f: mx.eval(f())
elif side == "numpy":
    import numpy as np
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    what = f"{blas['name']} {blas.get('version', '')}"
    array = lambda a: a
    run = lambda f: f()
else:
    import torch
    if cfg["threads"]:
        torch.set_num_threads(cfg["threads"])
    what = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    array = lambda a: torch.from_numpy(a)
    run = lambda f: f()
import numpy as np
rng = np.random.default_rng(0)
w_kn = rng.standard_normal((K, N), dtype=np.float32)
w_nk = np.ascontiguousarray(w_kn.T)
W, WT = array(w_kn), array(w_nk)
out = {}
for m in rows:
    x = array(rng.standard_normal((m, K), dtype=np.float32))
    for name, f in (("x@w", lambda: x @ W), ("x@wT", lambda: x @ WT.T)):
        for _ in range(3):
            run(f)
        best = (float("inf"), 0.0)
        for _ in range(reps):
            t, c = time.perf_counter(), time.process_time()
            run(f)
            best = min(best, (time.perf_counter() - t, time.process_time() - c))
        out[f"{m} {name}"] = [best[0] * 1e3, best[1] * 1e3]
print(json.dumps({"what": what, "times": out}))
"""


def sides(torch_python: str | None) -> list[tuple[str, str, dict]]:
    """(label, python, extra environment) per side."""
    out = [(f"mlx {b}", sys.executable, {"TTSCLI_BLAS": b}) for b in ("mkl", "openblas", "none")]
    out.append(("numpy", sys.executable, {}))
    if torch_python:
        out.append(("torch", torch_python, {}))
    return out


def run_side(label: str, python: str, extra: dict, args) -> dict:
    cfg = {"side": label, "rows": args.rows, "k": args.k, "n": args.n, "reps": args.reps, "threads": args.threads}
    env = {**os.environ, **extra, "PYTHONPATH": str(ROOT)}
    if args.threads:
        env.update({k: str(args.threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
    p = subprocess.run([python, "-c", CHILD, json.dumps(cfg)], env=env, capture_output=True, text=True,
                       timeout=900, check=False)
    if p.returncode != 0:
        return {"what": f"failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}", "times": {}}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,4,16,44,128", help="M values, comma-separated")
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n", type=int, default=3072)
    ap.add_argument("--reps", type=int, default=10, help="timed calls per cell per round")
    ap.add_argument("--rounds", type=int, default=2, help="passes over all sides (fastest kept)")
    ap.add_argument("--threads", type=int, default=0, help="threads per side (0: each library's default)")
    ap.add_argument("--torch-python", help="a python with torch (another environment is fine)")
    ap.add_argument("--skip", default="", help="sides to leave out, comma-separated (e.g. 'mlx none')")
    args = ap.parse_args()
    args.rows = [int(r) for r in args.rows.split(",")]
    chosen = [s for s in sides(args.torch_python) if s[0] not in args.skip.split(",")]
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for label, python, extra in chosen:
            got = run_side(label, python, extra, args)
            cell = best.setdefault(label, {"what": got["what"], "times": {}})
            for key, t in got["times"].items():
                if key not in cell["times"] or t[0] < cell["times"][key][0]:
                    cell["times"][key] = t
    keys = [f"{m} {f}" for m in args.rows for f in ("x@w", "x@wT")]
    print(f"[M, {args.k}] @ [{args.k}, {args.n}] float32, ms wall (ms CPU), fastest of {args.rounds}x{args.reps}")
    print("| side | " + " | ".join(f"M={k.replace(' ', ' ')}" for k in keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for label, cell in best.items():
        row = [f"{cell['times'][k][0]:.2f} ({cell['times'][k][1]:.2f})" if k in cell["times"] else "-" for k in keys]
        print(f"| {label} | " + " | ".join(row) + " |")
    for label, cell in best.items():
        print(f"{label}: {cell['what']}")


if __name__ == "__main__":
    main()
