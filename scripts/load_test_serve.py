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

Then two phases of clients that misbehave, each while C clients make --phase-requests ordinary
requests (their errors and p50/p95 are reported as above):
  3. slow clients: --slow-heads connections send a request head a byte a second and never end it
     (slowloris), --slow-bodies send a whole head and then trickle a body they never finish;
  4. connection flood: --flood connections open at once and send nothing.
For these: how long after opening the server dropped each kind (p50 and max), how many it had not
dropped when the phase ended, the answers they got (408, 503), the server's connection counts
(/health), and RSS and open file descriptors (/proc/PID/fd) before the phase and after it, once
the server is idle again. Everything runs on 127.0.0.1, and stops by itself.
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
import socket
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


FD_SLACK = 4             # open descriptors a server may hold beyond its idle count (a closing socket)
TRICKLE_S = 1.0          # a slow client sends one byte this often


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class BadClients:
    """Connections that misbehave, polled from one thread: "head" sends a header line a byte at a
    time that never ends, "body" sends a whole head with Content-Length 1000 and then trickles a
    body it never finishes, "idle" sends nothing. Each records when the server dropped it (end of
    stream or reset) and the status of any answer it read; and the most descriptors the server
    (process ``pid``) had open meanwhile."""

    def __init__(self, url: str, kinds: dict[str, int], pid: int):
        host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
        self.addr = (host, int(port))
        self.kinds = kinds
        self.pid = pid
        self.fds_peak = fd_count(pid)
        self.conns: list[dict] = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.deadline = float("inf")

    def head(self, kind: str) -> bytes:
        host = f"{self.addr[0]}:{self.addr[1]}"
        if kind == "head":
            return f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\n".encode()
        if kind == "body":
            return (f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                    "Content-Length: 1000\r\n\r\n{\"input\": \"").encode()
        return b""

    def open_all(self) -> None:
        for kind, n in self.kinds.items():
            for _ in range(n):
                sock = socket.create_connection(self.addr, timeout=10)
                sock.sendall(self.head(kind))
                sock.setblocking(False)
                self.conns.append({"kind": kind, "sock": sock, "opened": time.monotonic(), "dropped": None,
                                   "answer": b""})

    def poll(self, c: dict, now: float, trickle: bool) -> None:
        try:
            while data := c["sock"].recv(4096):
                c["answer"] += data
            c["dropped"] = now  # end of stream
        except BlockingIOError:
            if trickle and c["kind"] != "idle":
                try:
                    c["sock"].send(b"x")
                except BlockingIOError:
                    pass
                except OSError:
                    c["dropped"] = now
        except OSError:
            c["dropped"] = now  # reset
        if c["dropped"] is not None:
            c["sock"].close()

    def run(self) -> None:
        self.open_all()
        last = 0.0
        while time.monotonic() < self.deadline:
            now = time.monotonic()
            self.fds_peak = max(self.fds_peak, fd_count(self.pid))
            trickle, last = (True, now) if now - last >= TRICKLE_S else (False, last)
            live = [c for c in self.conns if c["dropped"] is None]
            if not live:
                return
            for c in live:
                self.poll(c, now, trickle)
            time.sleep(0.05)

    def close(self) -> None:
        for c in self.conns:
            if c["dropped"] is None:
                c["sock"].close()

    def figures(self) -> dict:
        out = {}
        for kind in self.kinds:
            mine = [c for c in self.conns if c["kind"] == kind]
            held = [c["dropped"] - c["opened"] for c in mine if c["dropped"] is not None]
            answers: dict[str, int] = {}
            for c in mine:
                status = c["answer"][9:12].decode("ascii", "replace") if c["answer"].startswith(b"HTTP/") else "none"
                answers[status] = answers.get(status, 0) + 1
            out[kind] = {"opened": len(mine), "still_open": len(mine) - len(held),
                         "dropped_after_p50_s": round(pct(held, 0.5), 2), "dropped_after_max_s": round(max(held), 2)
                         if held else None, "answers": answers}
        return out


def connection_counts(url: str) -> dict:
    return httpx.get(url + "/health", timeout=10).json().get("connections", {})


def abuse_phase(name: str, url: str, pid: int, kinds: dict[str, int], args, seed: int) -> dict:
    """Ordinary requests while the misbehaving clients hold their connections; the figures."""
    wait_idle(url)
    rss0, fds0, counts0 = rss_mb(pid), fd_count(pid), connection_counts(url)
    bad = BadClients(url, kinds, pid)
    bad.deadline = time.monotonic() + args.abuse_time_limit
    t0 = time.perf_counter()
    bad.thread.start()
    try:
        res = phase(url, args.phase_requests, args.clients, 0.0, args.timeout, bad.deadline, seed)
        bad.thread.join(max(1.0, bad.deadline - time.monotonic() + 5))
    finally:
        bad.close()
    s = summarize(name, res, args.phase_requests, wait_idle(url))
    counts1 = connection_counts(url)
    s.update(wall_s=round(time.perf_counter() - t0, 1), bad_connections=bad.figures(),
             server_connection_counts={k: counts1[k] - counts0.get(k, 0) for k in counts1
                                       if isinstance(counts1[k], int) and k not in ("open", "idle", "max")},
             rss_before_mb=round(rss0, 1), rss_after_mb=round(rss_mb(pid), 1),
             fds_before=fds0, fds_peak=bad.fds_peak, fds_after=fd_count(pid),
             load_average_end=[round(x, 1) for x in os.getloadavg()])
    s["failed"] = bool(s["errors"] or s["not_run"] or s["leaked_rows"] or s["fds_after"] > fds0 + FD_SLACK
                       or any(f["still_open"] for f in s["bad_connections"].values()))
    return s


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
    ap.add_argument("--phase-requests", type=int, default=40, help="ordinary requests in phases 3 and 4")
    ap.add_argument("--slow-heads", type=int, default=200, help="phase 3: connections trickling a request head")
    ap.add_argument("--slow-bodies", type=int, default=24, help="phase 3: connections trickling a body")
    ap.add_argument("--flood", type=int, default=400, help="phase 4: idle connections opened at once")
    ap.add_argument("--abuse-time-limit", type=float, default=120.0,
                    help="seconds phases 3 and 4 wait for the server to drop the bad connections")
    args = ap.parse_args()
    if args.requests > 2000 or args.clients > 64:
        raise SystemExit("bounded: at most 2000 requests and 64 clients")
    if args.phase_requests > 2000 or args.slow_heads + args.slow_bodies > 1000 or args.flood > 1000:
        raise SystemExit("bounded: at most 2000 requests and 1000 bad connections a phase")
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
        report["bad_client_phases"] = []
        for name, kinds, seed in (("slow clients", {"head": args.slow_heads, "body": args.slow_bodies}, 3),
                                  ("connection flood", {"idle": args.flood}, 4)):
            s = abuse_phase(name, url, proc.pid, kinds, args, seed)
            report["bad_client_phases"].append(s)
            print(json.dumps({k: v for k, v in s.items() if k != "server_counts"}), flush=True)
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
    abused = [p for p in report["bad_client_phases"] if p["failed"]]
    return 1 if bad or grew or abused else 0


if __name__ == "__main__":
    sys.exit(main())
