"""The pages a browser gets from `ttscli serve`: a playground at ``/`` and the API docs at ``/docs``.

Both are static files shipped in the package (``ttscli/serve/static``): plain HTML, CSS and JS,
no build step, nothing loaded from another site. The playground talks only to the server's own
API (``/v1/models``, ``/v1/audio/speech``), so the Host/Origin guard treats its requests as
same-origin ones and the API key, when the server has one, goes in the Authorization header as
for any client. The pages themselves hold no secret and are served without the key.

``/docs`` is Swagger UI over ``/openapi.json``, its script and stylesheet served from the
``fastapi-offline`` package's copy of swagger-ui-dist (FastAPI's default page loads them from a
CDN: offline that page is blank, online it tells a third party who reads the docs). Swagger UI 5
renders the OpenAPI 3.1 schema FastAPI writes; its "Authorize" button takes the key as a Bearer
token and keeps it in the page only.

Every page and asset carries a Content-Security-Policy that allows scripts from this server only
(no inline script: each page's code is a file) and ``X-Content-Type-Options: nosniff``.
"""
from __future__ import annotations

import copy
from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse
from starlette.staticfiles import StaticFiles

from ttscli.serve.app import error_body
from ttscli.serve.formats import RESPONSE_FORMATS, content_type

STATIC = Path(str(files("ttscli.serve") / "static"))
# Swagger UI sets style attributes and <style> elements as it renders, hence 'unsafe-inline' for
# styles there only; scripts, the part that can act, come from this server's files alone.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
            "media-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")
DOCS_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SPEECH_PATH = "/v1/audio/speech"


def page_headers(csp: str) -> dict[str, str]:
    return {"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


class PageFiles(StaticFiles):
    """Static files with the pages' security headers (a missing file is the API's JSON 404)."""

    def __init__(self, directory: Path, csp: str):
        super().__init__(directory=directory)
        self.headers = page_headers(csp)

    async def get_response(self, path, scope):
        response = await super().get_response(path, scope)
        response.headers.update(self.headers)
        return response


def swagger_dir() -> Path | None:
    """swagger-ui-dist's bundle and stylesheet as the ``fastapi-offline`` package ships them; None
    when it is not installed (``/docs`` then says what to install)."""
    try:
        return Path(str(files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        return None


def speech_body_schema() -> dict:
    """The JSON body of POST /v1/audio/speech as the docs show it. The route parses the body
    itself (so that bad input gets the CLI's one-line messages), which leaves FastAPI nothing to
    describe; this is the description."""
    text = {"type": "string"}
    return {"type": "object", "required": ["input"], "additionalProperties": True, "properties": {
        "model": {**text, "description": "a served model id (GET /v1/models); tts-1, tts-1-hd and "
                                         "gpt-4o-mini-tts mean the server's default model"},
        "input": {**text, "description": "the text to speak", "example": "Hello from ttscli."},
        "voice": {**text, "description": "a preset or saved voice (GET /v1/audio/voices); OpenAI's names "
                                         "give the model's default voice"},
        "response_format": {**text, "enum": list(RESPONSE_FORMATS), "default": "mp3"},
        "speed": {"type": "number", "minimum": 0.25, "maximum": 4.0, "default": 1.0},
        "stream_format": {**text, "enum": ["audio", "sse"], "default": "audio",
                          "description": "sse: Server-Sent Events with base64 pcm or wav deltas"},
        "stream": {"type": "boolean", "default": False,
                   "description": "send a wav or flac as it is made (open-ended sizes) instead of whole"},
        "sample_rate": {"type": "integer", "default": 24000},
        "seed": {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
        "instructions": {**text, "description": "a style instruction, for models that take one"},
        "language": text,
        "max_frames": {"type": "integer", "minimum": 1},
        "ref_audio": {**text, "format": "byte", "description": "a reference recording, base64, for models "
                                                               "that clone (or a multipart upload)"},
        "ref_text": {**text, "description": "the reference recording's transcript"},
    }}


def openapi_schema(app: FastAPI, api_key: bool) -> dict:
    """FastAPI's schema with the speech body described and, when a key is set, the Bearer scheme
    that Swagger UI's Authorize button fills in."""
    schema = copy.deepcopy(app.openapi())
    post = schema.get("paths", {}).get(SPEECH_PATH, {}).get("post")
    if post is not None:
        example = {"input": "Hello from ttscli.", "response_format": "wav"}
        post["requestBody"] = {"required": True, "content": {"application/json": {
            "schema": speech_body_schema(), "example": example}}}
        audio = {"schema": {"type": "string", "format": "binary"}}
        post["responses"]["200"] = {"description": "the audio, or Server-Sent Events with stream_format sse",
                                    "content": {**{content_type(f): audio for f in RESPONSE_FORMATS},
                                                "text/event-stream": {"schema": {"type": "string"}}}}
    if api_key:
        schema.setdefault("components", {})["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        schema["security"] = [{"bearer": []}]
    return schema


def add_pages(app: FastAPI, api_key: bool) -> None:
    """Serve the playground at /, the docs at /docs, the schema at /openapi.json."""
    page = page_headers(PAGE_CSP)
    docs = page_headers(DOCS_CSP)
    app.mount("/static", PageFiles(STATIC, PAGE_CSP), name="static")
    assets = swagger_dir()
    if assets is not None:
        app.mount("/docs/assets", PageFiles(assets, DOCS_CSP), name="docs-assets")
    schema: dict = {}

    @app.get("/", include_in_schema=False)
    async def playground():
        return FileResponse(STATIC / "index.html", headers=page)

    @app.get("/docs", include_in_schema=False)
    async def api_docs():
        if assets is None:
            message = ("the API docs page needs fastapi-offline (pip install 'ttscli[serve]'); "
                       "/openapi.json has the schema")
            return JSONResponse(error_body(404, message), status_code=404, headers=docs)
        return FileResponse(STATIC / "docs.html", headers=docs)

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi():
        if not schema:
            schema.update(openapi_schema(app, api_key))
        return JSONResponse(schema, headers={"X-Content-Type-Options": "nosniff"})
