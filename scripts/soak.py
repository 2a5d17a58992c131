"""Memory of a long-running process: RSS after N syntheses of varied text through the library API.

    .venv/bin/python scripts/soak.py piper --n 100 --backend vits=mlx   # the embedded voice on MLX
    .venv/bin/python scripts/soak.py qwen3 --n 30                 # Qwen3-TTS 0.6B, random weights
    .venv/bin/python scripts/soak.py piper --n 100 --no-compile   # the same with mx.disable_compile()

(On a Linux CPU the embedded voice defaults to onnxruntime; --backend vits=mlx measures
the MLX model, whose compiled graphs are what could grow.) Every synthesis gets a different text
(so a different length, as a server or a batch run sees), and RSS is printed after the 1st, the 10th
and every 10th synthesis. A process
that keeps something per new input shape (compiled graphs, caches) grows here; a bounded one
levels off after the first few. Growth is reported from the 10th synthesis on, after the
allocator and MLX's buffer cache have warmed up.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

WORDS = ("the quick brown fox jumps over lazy dog while seven bright lanterns swing above harbour "
         "where patient sailors mend their nets and sing about distant islands under silver morning "
         "light before rain arrives from western hills carrying news of harvest festivals").split()


def texts(n: int, seed: int = 0, lo: int = 3, hi: int = 40) -> list[str]:
    """n sentences of lo..hi words, all different."""
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        k = rng.randint(lo, hi)
        s = " ".join(rng.choice(WORDS) for _ in range(k)).capitalize() + "."
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def traces() -> str:
    """Traces held by every compile_bounded site now (sites/traces)."""
    import gc

    from ttscli.nn.compiled import BoundedCompile

    sites = [o for o in gc.get_objects() if isinstance(o, BoundedCompile)]
    return f"{sum(len(s) for s in sites)} in {len(sites)} sites"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", choices=["piper", "qwen3"])
    ap.add_argument("--n", type=int, default=None, help="syntheses (default: 100 piper, 30 qwen3)")
    ap.add_argument("--no-compile", action="store_true", help="mx.disable_compile() first")
    ap.add_argument("--model", default=None)
    ap.add_argument("--backend", action="append", default=[], metavar="COMPONENT=NAME",
                    help="where a component runs, as ttscli's --backend (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-words", type=int, default=24, help="texts of 3..N words")
    ap.add_argument("--frames", default="4,24", help="qwen3: frames per synthesis, drawn from LO,HI")
    ap.add_argument("--max-shapes", type=int, default=None,
                    help="traces kept per compile_bounded site (default: ttscli.nn.compiled.MAX_SHAPES)")
    a = ap.parse_args()
    if a.max_shapes is not None:  # before any model module builds its compiled sites
        from ttscli.nn import compiled

        compiled.BoundedCompile.__init__.__defaults__ = (a.max_shapes,)
        compiled.compile_bounded.__kwdefaults__ = {"max_shapes": a.max_shapes}

    import mlx.core as mx

    import ttscli
    from ttscli.backends.select import parse_backend_options
    from ttscli.models.base import LoadOptions

    if a.no_compile:
        mx.disable_compile()
    n = a.n or (100 if a.family == "piper" else 30)
    if a.family == "piper":
        pipe = ttscli.load(a.model or "piper-joe", backends=parse_backend_options(a.backend))
        reqs = [ttscli.Request(t, seed=i) for i, t in enumerate(texts(n, a.seed, 3, a.max_words))]
    else:
        pipe = ttscli.load(a.model or "qwen3-tts-0.6b-customvoice",
                           options=LoadOptions(random_weights=True, backends=parse_backend_options(a.backend)))
        rng = random.Random(a.seed)
        reqs = []
        for i, t in enumerate(texts(n, a.seed, 2, a.max_words)):
            # random weights never choose EOS: run a varied number of frames instead
            r = ttscli.Request(t, seed=i, max_frames=rng.randint(*map(int, a.frames.split(","))))
            if hasattr(r, "ignore_eos"):
                r.ignore_eos = True
            else:
                r.extra["ignore_eos"] = True
            reqs.append(r)

    print(f"{a.family}: {n} syntheses of varied text, compile {'off' if a.no_compile else 'on'}; "
          f"RSS after load {rss_mib():.0f} MiB", flush=True)
    marks = {1, 10, n} | set(range(10, n + 1, 10))
    at = {}
    longest = 0.0  # RSS follows the largest synthesis so far (its buffers), not the count of them
    t0 = time.perf_counter()
    for i, r in enumerate(reqs, 1):
        samples = sum(len(x) for x in ttscli.synthesize(pipe, r))
        longest = max(longest, samples / pipe.sample_rate)
        if i in marks:
            at[i] = rss_mib()
            print(f"after {i:4d}: RSS {at[i]:7.1f} MiB  (MLX active {mx.get_active_memory() / 2**20:6.1f}, "
                  f"cache {mx.get_cache_memory() / 2**20:6.1f} MiB; {traces()} bounded traces; "
                  f"last {samples / pipe.sample_rate:5.2f} s audio, longest {longest:5.2f} s; "
                  f"{time.perf_counter() - t0:6.1f} s)", flush=True)
    if 10 in at and n > 10:
        grow = at[n] / at[10] - 1
        print(f"growth from 10 to {n}: {at[n] - at[10]:+.1f} MiB ({grow:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
