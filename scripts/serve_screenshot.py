"""Write docs/serve-playground.png: the playground page of `ttscli serve` after it has spoken.

    python scripts/serve_screenshot.py                 # docs/serve-playground.png
    python scripts/serve_screenshot.py -o shot.png

Starts the server with the embedded voice on a free loopback port (the tests' own helper), opens
``/`` in headless Chromium through Playwright (Debian's chromium: ``make browser``), speaks a
sentence and photographs the page with its player and download link showing.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "serve"))
from servertools import Server

TEXT = "Hello from ttscli. This voice runs on this machine, with no network."
WAIT_MS = 90_000


def shoot(out: Path, width: int, height: int) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("no chromium here: apt-get install chromium (or make browser)")
    server = Server([])
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True)
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(WAIT_MS)
            page.goto(server.url + "/")
            page.wait_for_selector("#status[data-state=ready]", state="attached")
            page.fill("#text", TEXT)
            page.click("#speak")
            page.wait_for_selector("#status[data-state=ended]", state="attached")
            page.screenshot(path=str(out), full_page=True)
            browser.close()
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "docs" / "serve-playground.png")
    ap.add_argument("--width", type=int, default=960)
    ap.add_argument("--height", type=int, default=640)
    args = ap.parse_args()
    shoot(args.output, args.width, args.height)
    print(args.output)


if __name__ == "__main__":
    main()
