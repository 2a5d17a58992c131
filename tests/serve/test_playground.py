"""The playground page (/) and the API docs (/docs) of `ttscli serve`, in headless Chromium.

A real server with the embedded voice and an API key; Playwright drives Debian's chromium
(`make browser` installs it). The page must ask for the key, speak, play the whole WAV, stream
pcm through Web Audio, and offer the file for download, loading nothing from another site.
"""
from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servertools import Server

KEY = "playground-key-456"
TEXT = "Hello from the playground. This sentence is spoken in the browser."
WAIT_MS = 90_000          # bound on any one wait for the page (synthesis and playback of a few seconds)
STATIC = Path(__file__).resolve().parents[2] / "ttscli" / "serve" / "static"


def missing(reason: str):
    """No browser here: a skip on a developer's machine, a failure in CI (where `make test` installs one)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser test (make test installs playwright and chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install -e '.[test]')")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        missing("no chromium on this machine (as root: apt-get install chromium, or make browser)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(["--api-key", KEY], env={"TTSCLI_CACHE": str(tmp_path_factory.mktemp("play-cache"))})
    yield s
    assert s.stop() is not None


class Watched:
    """A page with what it asked for and what went wrong in it recorded."""

    def __init__(self, browser):
        self.page = browser.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.requests, self.problems = [], []
        self.page.on("request", lambda r: self.requests.append(r))
        self.page.on("console", lambda m: m.type == "error" and self.problems.append(m.text))
        self.page.on("pageerror", lambda e: self.problems.append(str(e)))

    def status(self) -> dict:
        return self.page.eval_on_selector("#status", "e => ({...e.dataset, text: e.textContent})")

    def wait_state(self, state: str) -> dict:
        self.page.wait_for_selector(f"#status[data-state={state}], #status[data-state=error]", state="attached")
        got = self.status()
        assert got["state"] == state, got
        return got


@pytest.fixture
def page(chromium, server):
    w = Watched(chromium)
    response = w.page.goto(server.url + "/")
    assert response.status == 200, response.status
    w.page.wait_for_selector("#key-form", state="visible")   # the server has a key: the page asks for it
    w.page.fill("#key", KEY)
    w.page.click("#key-form button")
    w.wait_state("ready")
    models = [r for r in w.requests if r.url.endswith("/v1/models")]
    assert [r.headers.get("authorization") for r in models] == [None, f"Bearer {KEY}"]
    assert len(w.problems) == 1 and "401" in w.problems[0], w.problems   # the keyless first try
    w.requests.clear()
    w.problems.clear()
    yield w
    w.page.close()


def wav_seconds(data: bytes) -> float:
    info = sf.info(io.BytesIO(data))
    return info.frames / info.samplerate


def check_requests(w: Watched, server) -> None:
    """Only this server was asked, never with the key in a URL, and the API calls carried it."""
    urls = [r.url for r in w.requests]
    assert all(u.startswith(server.url + "/") or u.startswith(("blob:", "data:")) for u in urls), urls
    assert not any(KEY in u for u in urls)
    api = [r for r in w.requests if "/v1/" in r.url]
    assert api and all(r.headers.get("authorization") == f"Bearer {KEY}" for r in api)
    # the posts carry the page's Origin, which the Host/Origin guard took as this server's own
    posts = [r for r in api if r.method == "POST"]
    assert posts and all(r.all_headers().get("origin") == server.url for r in posts)
    assert not w.problems, w.problems


def test_pages_are_served_with_their_headers(server):
    """/ and /docs answer with a strict CSP and nosniff; their files load nothing from elsewhere."""
    with httpx.Client(timeout=30) as c:
        for path in ("/", "/docs", "/static/playground.js", "/docs/assets/swagger-ui-bundle.js"):
            r = c.get(server.url + path)
            assert r.status_code == 200, (path, r.text[:200])
            assert r.headers["x-content-type-options"] == "nosniff"
            script_src = re.search(r"script-src ([^;]*)", r.headers["content-security-policy"]).group(1)
            assert script_src.split() == ["'self'"], r.headers["content-security-policy"]
        # the pages are behind the Host guard like the API (a DNS-rebinding page cannot read them)
        assert c.get(server.url + "/", headers={"Host": "rebound.example"}).status_code == 400
        schema = c.get(server.url + "/openapi.json").json()
        body = schema["paths"]["/v1/audio/speech"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == ["input"] and "wav" in body["properties"]["response_format"]["enum"]
        assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
        models = c.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()["data"]
        assert models[0]["voices"] == ["joe"] and models[0]["clone"] is False
        assert {"wav", "pcm"} <= set(models[0]["response_formats"])
    for f in STATIC.iterdir():
        text = f.read_text()
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text, re.I), f"{f.name} names another site"
        if f.suffix == ".html":
            assert not re.search(r"<script(?![^>]*\bsrc=)", text), f"{f.name} has an inline script"


def test_speak_plays_the_whole_wav_and_offers_it(page, server):
    p = page.page
    assert p.is_hidden("#clone-controls") and "cannot clone" in p.text_content("#clone-note")
    p.select_option("#model", "piper-joe")
    p.select_option("#voice", "joe")
    p.select_option("#format", "wav")
    p.fill("#text", TEXT)
    p.click("#speak")
    played = page.wait_state("ended")
    link = p.locator("#download")
    assert link.get_attribute("download") == "speech.wav"
    with p.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "speech.wav"
    data = Path(download.value.path()).read_bytes()
    assert data[:4] == b"RIFF" and int.from_bytes(data[4:8], "little") == len(data) - 8
    seconds = wav_seconds(data)
    assert seconds > 1.0
    # the element played the file from start to end: its media time, and (a lower bound only)
    # the time that passed while it played
    assert abs(float(played["duration"]) - seconds) < 0.02, (played, seconds)
    assert abs(float(played["played"]) - seconds) < 0.05, (played, seconds)
    assert float(played["elapsed"]) > 0.9 * seconds, (played, seconds)
    check_requests(page, server)


def test_stream_plays_through_web_audio(page, server):
    p = page.page
    p.fill("#text", TEXT)
    p.click("#stream")
    got = page.wait_state("stream-ended")
    streamed, played, rate = float(got["streamSeconds"]), float(got["streamPlayed"]), int(got["streamRate"])
    assert rate == 24000
    r = httpx.post(server.url + "/v1/audio/speech", headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
                   json={"input": TEXT, "response_format": "wav"})
    whole = wav_seconds(r.content)
    # the same text: about as long as the WAV. The page sends no seed, so each request draws its
    # own duration noise (Piper's noise_w): two runs of this text differ by up to ~15%; a cut or
    # doubled stream would be off by far more
    assert abs(streamed - whole) < 0.25 * whole, (got, whole)
    # every chunk was scheduled after the one before, and the audio clock ran through all of them
    assert played > streamed - 0.05, got
    stream_calls = [r for r in page.requests if r.url.endswith("/v1/audio/speech")]
    assert len(stream_calls) == 1 and '"stream":true' in stream_calls[0].post_data
    check_requests(page, server)


def test_docs_try_the_api_from_this_server_only(chromium, server):
    """Swagger UI loads from this server, takes the key through Authorize, and its documented
    example body speaks (the answer offered as a download)."""
    w = Watched(chromium)
    try:
        p = w.page
        assert p.goto(server.url + "/docs").status == 200
        p.click("button.authorize")
        p.fill(".modal-ux input", KEY)
        p.click(".modal-ux button.authorize")
        p.click(".modal-ux button.btn-done")
        op = p.locator("#operations-default-speech_v1_audio_speech_post")
        op.locator(".opblock-summary").click()
        op.locator("button.try-out__btn").click()
        with p.expect_response(lambda r: r.url.endswith("/v1/audio/speech")) as answer:
            op.locator("button.execute").click()
        r = answer.value
        assert r.status == 200 and r.headers["content-type"] == "audio/wav"
        assert r.request.all_headers()["authorization"] == f"Bearer {KEY}"
        with p.expect_download() as download:
            op.locator(".response-col_description a", has_text="Download file").click()
        assert download.value.suggested_filename == "speech.wav"
        assert wav_seconds(Path(download.value.path()).read_bytes()) > 0.5
        assert all(r.url.startswith(server.url + "/") or r.url.startswith(("data:", "blob:")) for r in w.requests), \
            [r.url for r in w.requests]
        assert not any(KEY in r.url for r in w.requests)
        assert not w.problems, w.problems
    finally:
        p.close()


BASE = "qwen3-tts-0.6b-base"


@pytest.fixture(scope="module")
def clone_server(tmp_path_factory):
    """A model that clones: the complete tiny Qwen3-TTS Base checkpoint (random weights, real paths)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qwen3_e2e"))
    from e2e_fixture import build

    ckpt = build("base", tmp_path_factory.mktemp("play-qwen3") / "base", eos_gain=3.0)
    s = Server(["-m", BASE, "--model-dir", ckpt])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ref_clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("play-ref") / "ref.wav"
    sr = 24000
    t = np.arange(int(sr * 1.5)) / sr
    sf.write(str(path), (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), sr)
    return path


def test_clone_upload_from_the_page(chromium, clone_server, ref_clip):
    """The page uploads the chosen clip with its transcript; without the transcript it shows the
    server's one-line reason."""
    w = Watched(chromium)
    try:
        assert w.page.goto(clone_server.url + "/").status == 200
        w.wait_state("ready")
        p = w.page
        assert p.is_visible("#clone-controls") and p.is_hidden("#clone-note")
        p.fill("#text", "Words in the new voice.")
        p.set_input_files("#ref-audio", str(ref_clip))
        p.click("#speak")
        w.wait_state("error")
        assert "ref_text" in p.text_content("#status")
        w.problems.clear()                     # the 400 the browser logged
        p.fill("#ref-text", "A reference sentence.")
        p.click("#speak")
        w.wait_state("ended")
        with p.expect_download() as download:
            p.click("#download")
        data = Path(download.value.path()).read_bytes()
        assert wav_seconds(data) > 0
        sent = [r for r in w.requests if r.url.endswith("/v1/audio/speech")]
        body = json.loads(sent[-1].post_data)
        assert base64.b64decode(body["ref_audio"]) == ref_clip.read_bytes()
        assert body["ref_text"] == "A reference sentence." and body["model"] == BASE
        assert not w.problems, w.problems
    finally:
        w.page.close()
