"""Start `ttscli serve` on 127.0.0.1 (a free port) for a test, and stop it (imported by name)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import ttscli_exe

READY = re.compile(r"serving .* on (http://127\.0\.0\.1:\d+)")


class Server:
    def __init__(self, args, env=None, cwd=None, timeout=240):
        e = dict(os.environ)
        e.setdefault("HF_HUB_OFFLINE", "1")
        e.update(env or {})
        self.proc = subprocess.Popen(ttscli_exe() + ["serve", "--port", "0", *map(str, args)], env=e, cwd=cwd,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = None
        ready = threading.Event()

        def read():  # keep draining stderr so the server never blocks on it
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = READY.search(line)
                if m and self.url is None:
                    self.url = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(timeout) or self.url is None:
            self.stop()
            raise RuntimeError("the server did not start:\n" + "\n".join(self.lines))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def wait_idle(self, client, timeout=60.0) -> dict:
        """/health once nothing is queued or running (a disconnected client frees its row)."""
        deadline = time.monotonic() + timeout
        while True:
            h = client.get(self.url + "/health").json()["models"]
            if all(m["queued"] == 0 and m["active"] == 0 for m in h.values()):
                return h
            if time.monotonic() > deadline:
                raise AssertionError(f"rows still held: {h}")
            time.sleep(0.1)
