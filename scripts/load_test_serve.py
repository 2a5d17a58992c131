#!/usr/bin/env python
"""Load test of `ttscli serve` on 127.0.0.1 (bounded in count and time; it stops by itself).

Starts a server with the given model (default: the embedded voice), measures its RSS once it
is ready and again after three warm-up requests (the baseline: a server that has answered a
request, idle), then runs two phases of N requests from C concurrent clients, streaming PCM:
  1. every client reads its response to the end;
  2. the same with a fraction of requests dropped mid-stream (the client closes the connection
     after the first chunk).
Reports p50/p95 time to first byte and to last byte, errors, rows left queued/active on the
server after each phase (leaks), RSS before/after (each read once the server is idle again), and
the machine's load average (the figures depend on what else runs).

A third phase, long-request fairness (--fairness K): one maximal request (--long-chars of text,
the server's default --max-input-chars) streams while K short requests ("Hi.") are sent one
after another, a --fairness-gap apart, for as long as it runs; reports the short requests' time
to first byte and the long request's total time. (--requests 0 runs this phase alone.)

    .venv/bin/python scripts/load_test_serve.py --requests 200 --clients 16 --disconnect 0.1
    .venv/bin/python scripts/load_test_serve.py --requests 0 --fairness 10
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Speech synthesis on a small machine takes patience.",
    "Every request waits its turn for the model.",
    "A server should never leak what a client abandons.",
    "Numbers such as 42 and 1999 are read aloud.",
    "Short.",
    "Is this the right way to the station?",
    "Streaming audio starts before the sentence ends.",
]


def start_server(args) -> tuple[subprocess.Popen, str]:
    exe = str(Path(sys.executable).with_name("ttscli"))
    cmd = [exe, "serve", "--host", "127.0.0.1", "--port", "0", "--max-queue", str(args.clients * 2)]
    if args.model:
        cmd += ["-m", args.model]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            raise SystemExit("the server exited before it was ready")
        m = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    proc.kill()
    raise SystemExit("the server did not start within 300 s")


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """VmRSS, or RssAnon: the private pages a leak grows (VmRSS also counts the libraries' file
    pages, which the kernel may drop from a process under memory pressure and read back later)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


def one_request(url: str, text: str, seed: int, drop: bool, timeout: float) -> dict:
    t0 = time.perf_counter()
    ttfb = None
    n = 0
    try:
        with httpx.Client(timeout=timeout) as c, c.stream(
                "POST", url + "/v1/audio/speech",
                json={"input": text, "response_format": "pcm", "seed": seed}) as r:
            if r.status_code != 200:
                r.read()
                return {"ok": False, "status": r.status_code, "error": r.text[:200]}
            for part in r.iter_raw():
                if ttfb is None:
                    ttfb = time.perf_counter() - t0
                n += len(part)
                if drop:
                    break  # leaving the `with` closes the connection mid-stream
    except httpx.HTTPError as e:
        return {"ok": False, "status": None, "error": f"{type(e).__name__}: {e}"}
    return {"ok": True, "ttfb": ttfb, "total": time.perf_counter() - t0, "bytes": n, "dropped": drop}


def phase(url: str, n: int, clients: int, drop_frac: float, timeout: float, deadline: float, seed: int) -> list[dict]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        text = " ".join(rng.sample(SENTENCES, rng.randint(1, 2)))
        jobs.append((text, i, rng.random() < drop_frac))
    lock = threading.Lock()
    results: list[dict] = []
    it = iter(jobs)

    def client():
        while time.monotonic() < deadline:
            with lock:
                job = next(it, None)
            if job is None:
                return
            res = one_request(url, *job, timeout)
            with lock:
                results.append(res)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic() + timeout))
    return results


def long_text(chars: int) -> str:
    """Whole sentences of SENTENCES, in turn, up to ``chars`` characters."""
    out, i = "", 0
    while len(out) + 1 + len(SENTENCES[i % len(SENTENCES)]) <= chars:
        out += (" " if out else "") + SENTENCES[i % len(SENTENCES)]
        i += 1
    return out


def fairness_phase(url: str, k: int, chars: int, gap: float, timeout: float) -> dict:
    """One long request read to the end; once its audio flows, up to ``k`` short requests in
    sequence while it still runs. A short request counts if it was sent before the long one ended."""
    long_res: dict = {}
    flowing = threading.Event()

    def run_long():
        t0 = time.perf_counter()
        try:
            with httpx.Client(timeout=timeout) as c, c.stream(
                    "POST", url + "/v1/audio/speech",
                    json={"input": long_text(chars), "response_format": "pcm", "seed": 1}) as r:
                if r.status_code != 200:
                    r.read()
                    long_res.update(ok=False, error=f"{r.status_code}: {r.text[:200]}")
                    return
                for _ in r.iter_raw():
                    long_res.setdefault("ttfb", time.perf_counter() - t0)
                    flowing.set()
            long_res.update(ok=True, total=time.perf_counter() - t0)
        except httpx.HTTPError as e:
            long_res.update(ok=False, error=f"{type(e).__name__}: {e}")
        finally:
            flowing.set()

    t = threading.Thread(target=run_long)
    t.start()
    flowing.wait(timeout)
    shorts = []
    while len(shorts) < k and t.is_alive():
        shorts.append(one_request(url, "Hi.", len(shorts), False, timeout))
        time.sleep(gap)
    t.join(timeout)
    ok = [r for r in shorts if r["ok"]]
    return {"phase": "long-request fairness", "long_chars": len(long_text(chars)), "long_ok": long_res.get("ok"),
            "long_ttfb_s": round(long_res.get("ttfb", float("nan")), 3),
            "long_total_s": round(long_res.get("total", float("nan")), 3),
            "shorts_during_long": len(shorts), "short_errors": len(shorts) - len(ok),
            "short_ttfb_p50_s": round(pct([r["ttfb"] for r in ok], 0.5), 3),
            "short_ttfb_p95_s": round(pct([r["ttfb"] for r in ok], 0.95), 3),
            "short_ttfb_max_s": round(max([r["ttfb"] for r in ok], default=float("nan")), 3),
            "short_total_p50_s": round(pct([r["total"] for r in ok], 0.5), 3),
            "first_errors": ([long_res["error"]] if "error" in long_res else [])
            + [r["error"] for r in shorts if not r["ok"]][:3]}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def wait_idle(url: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        h = httpx.get(url + "/health", timeout=10).json()["models"]
        if all(m["queued"] == 0 and m["active"] == 0 for m in h.values()) or time.monotonic() > deadline:
            # the model thread trims the heap just after its last row ends (up to ~0.1 s here):
            # RSS read before that would count pages it is about to return
            time.sleep(1.0)
            return h
        time.sleep(0.2)


def summarize(name: str, results: list[dict], n: int, health: dict) -> dict:
    ok = [r for r in results if r["ok"]]
    full = [r for r in ok if not r["dropped"]]
    leaked = sum(m["queued"] + m["active"] for m in health.values())
    return {"phase": name, "requests": n, "completed": len(results), "ok": len(ok), "errors": len(results) - len(ok),
            "not_run": n - len(results), "dropped_mid_stream": sum(r["dropped"] for r in ok),
            "ttfb_p50_s": round(pct([r["ttfb"] for r in ok if r["ttfb"] is not None], 0.5), 3),
            "ttfb_p95_s": round(pct([r["ttfb"] for r in ok if r["ttfb"] is not None], 0.95), 3),
            "total_p50_s": round(pct([r["total"] for r in full], 0.5), 3),
            "total_p95_s": round(pct([r["total"] for r in full], 0.95), 3),
            "leaked_rows": leaked, "server_counts": health,
            "first_errors": [r["error"] for r in results if not r["ok"]][:3]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--disconnect", type=float, default=0.1, help="fraction dropped mid-stream in phase 2")
    ap.add_argument("--time-limit", type=float, default=1800.0, help="seconds per phase, then it stops")
    ap.add_argument("--timeout", type=float, default=600.0, help="per request")
    ap.add_argument("--fairness", type=int, default=10,
                    help="short requests sent while one maximal request runs (0: skip that phase)")
    ap.add_argument("--long-chars", type=int, default=4096, help="the maximal request's length in characters")
    ap.add_argument("--fairness-gap", type=float, default=1.0, help="seconds between the short requests")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.requests > 2000 or args.clients > 64:
        raise SystemExit("bounded: at most 2000 requests and 64 clients")
    if args.fairness > 200 or args.long_chars > 32768:
        raise SystemExit("bounded: at most 200 short requests and a 32,768-character long one")

    proc, url = start_server(args)
    load_start = os.getloadavg()
    try:
        rss_ready = rss_mb(proc.pid)
        for i in range(3):  # warm-up: first-use allocations are not a leak
            one_request(url, SENTENCES[i], i, False, args.timeout)
        wait_idle(url)
        rss_before, anon_before = rss_mb(proc.pid), rss_mb(proc.pid, "RssAnon")
        report = {"url": url, "model": args.model or "(default)", "clients": args.clients, "phases": []}
        for name, frac, seed in (("all read to the end", 0.0, 1),
                                 (f"{args.disconnect:.0%} disconnect", args.disconnect, 2)):
            t0 = time.perf_counter()
            res = phase(url, args.requests, args.clients, frac, args.timeout, time.monotonic() + args.time_limit, seed)
            s = summarize(name, res, args.requests, wait_idle(url))
            s["wall_s"] = round(time.perf_counter() - t0, 1)
            s["rss_mb"] = round(rss_mb(proc.pid), 1)
            s["rss_anon_mb"] = round(rss_mb(proc.pid, "RssAnon"), 1)
            report["phases"].append(s)
            print(json.dumps({k: v for k, v in s.items() if k != "server_counts"}), flush=True)
        if args.fairness:
            f = fairness_phase(url, args.fairness, args.long_chars, args.fairness_gap, args.timeout)
            f["leaked_rows"] = sum(m["queued"] + m["active"] for m in wait_idle(url).values())
            report["fairness"] = f
            print(json.dumps(f), flush=True)
        rss_after, anon_after = rss_mb(proc.pid), rss_mb(proc.pid, "RssAnon")
        report.update(rss_ready_mb=round(rss_ready, 1), rss_before_mb=round(rss_before, 1),
                      rss_after_mb=round(rss_after, 1), rss_change=round(rss_after / rss_before - 1, 4),
                      rss_anon_before_mb=round(anon_before, 1), rss_anon_after_mb=round(anon_after, 1),
                      rss_anon_change=round(anon_after / anon_before - 1, 4),
                      cpu_count=os.cpu_count(), load_average_start=[round(x, 1) for x in load_start],
                      load_average_end=[round(x, 1) for x in os.getloadavg()])
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"RSS ready {report['rss_ready_mb']} MB, after warm-up {report['rss_before_mb']} MB, after the phases "
          f"{report['rss_after_mb']} MB ({report['rss_change']:+.1%}); RssAnon {report['rss_anon_before_mb']} -> "
          f"{report['rss_anon_after_mb']} MB ({report['rss_anon_change']:+.1%}); "
          f"load average {report['load_average_start']} "
          f"at the start, {report['load_average_end']} at the end, {report['cpu_count']} CPUs")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    bad = [p for p in report["phases"] if p["errors"] or p["not_run"] or p["leaked_rows"]]
    fair = report.get("fairness")
    if fair and (not fair["long_ok"] or fair["short_errors"] or fair["leaked_rows"]):
        bad.append(fair)
    # growth fails either figure; a drop fails only the private pages (VmRSS drops when the kernel
    # reclaims file pages, which is no sign of a leak)
    grew = report["rss_change"] > 0.10 or abs(report["rss_anon_change"]) > 0.10
    return 1 if bad or grew else 0


if __name__ == "__main__":
    sys.exit(main())
