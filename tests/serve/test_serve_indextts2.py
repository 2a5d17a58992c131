"""`ttscli serve -m indextts2` on the tiny folder: a clone by upload with an emotion vector, and a
request naming a file on the server's machine (--emotion-ref's field) refused with a 400."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servertools import Server, error, speech

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(["-m", "indextts2", "--model-dir", FIX / "tiny"],
               env={"TTSCLI_CACHE": str(tmp_path_factory.mktemp("serve-cache"))})
    yield s
    assert s.stop() is not None


def test_clone_upload_with_emotion_vector(server):
    buf = io.BytesIO()
    sf.write(buf, np.load(FIX / "frontend.npz")["ref22"], 22050, format="WAV")
    r = httpx.post(server.url + "/v1/audio/speech", timeout=120,
                   data={"input": "Hello there.", "model": "indextts2", "response_format": "wav",
                         "emotion": "happy=0.7", "tokens": "9", "seed": "1", "sample_rate": "22050"},
                   files={"ref_audio": ("me.wav", buf.getvalue(), "audio/wav")})
    assert r.status_code == 200, r.text
    wav, sr = sf.read(io.BytesIO(r.content))
    assert sr == 22050 and len(wav) == 15 * 256


def test_a_server_side_path_is_refused(server):
    with httpx.Client(timeout=60) as c:
        r = speech(c, server, model="indextts2", input="Hi.", emotion_ref="/etc/hostname")
    assert r.status_code == 400 and "emotion_ref names a file" in error(r)
