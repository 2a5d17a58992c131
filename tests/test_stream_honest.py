"""--stream is honoured by every model that `ttscli models` says streams."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from ttscli.generate import Request, check_request
from ttscli.models import family_of
from ttscli.registry import load_registry


def streaming_models():
    return [s for s in load_registry() if s.implemented and s.can("streaming")]


@pytest.mark.parametrize("spec", streaming_models(), ids=lambda s: s.id)
def test_a_streaming_model_takes_stream(spec):
    """What `ttscli models` shows as `stream` passes the engine's check with --stream."""
    required = {"instruct": {"instruct": "A calm voice."}}
    asked = {k: v for name in spec.requires for k, v in required[name].items()}
    assert check_request(spec, family_of(spec), Request(text="Hi.", stream=True, **asked)).stream


def test_models_and_speak_stream_agree_on_piper(run_cli, tmp_path):
    info = json.loads(run_cli("models", "piper-joe", "--json").stdout)
    assert "streaming" in info["capabilities"] and "stream" in info["honours"]
    text = "Streams a sentence at a time. Then another one."
    p = run_cli("speak", text, "--stream", "--seed", "3", "-o", "s.wav")
    assert p.returncode == 0, p.err
    q = run_cli("speak", text, "--seed", "3", "-o", "plain.wav")
    assert q.returncode == 0, q.err
    a, b = sf.read(str(tmp_path / "s.wav"))[0], sf.read(str(tmp_path / "plain.wav"))[0]
    assert len(a) == len(b) and np.abs(a - b).max() < 1e-3


def test_models_says_what_first_audio_waits_for():
    from ttscli.inventory import describe

    reg = load_registry()
    shown = {s.id: describe(reg, s) for s in streaming_models()}
    assert all("stream" in info["honours"] for info in shown.values())
    assert shown["piper-joe"]["first_audio"] == "its first sentence chunk"
    kokoro = shown[reg.resolve("kokoro").id]
    assert kokoro["first_chunk_frames"] is None and "first sentence or clause" in kokoro["first_audio"]
