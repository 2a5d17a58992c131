"""Qwen3-TTS with --code-decoder-backend onnx through the installed `ttscli`, on a complete tiny
checkpoint (tests/qwen3_e2e/e2e_fixture.py): speak and --stream, the one-worker note (the
embeddings, samplers and speech decoder are MLX), audio equal to the MLX talker's at float32."""
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qwen3_e2e"))
from e2e_fixture import build

pytest.importorskip("onnxruntime")
CV = "qwen3-tts-0.6b-customvoice"
TEXT = "Hello there. How are you today? Fine, thanks."


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build("customvoice", tmp_path_factory.mktemp("e2e") / "cv")


def speak(run_cli, ckpt, out, *extra):
    p = run_cli("speak", TEXT, "-m", CV, "--model-dir", ckpt, "--voice", "ryan", "--seed", "4",
                "--max-frames", "200", "-o", out, *extra)
    assert p.returncode == 0, p.err
    return p, sf.read(out)[0]


def test_onnx_speak_workers_and_stream(run_cli, ckpt, tmp_path):
    _, mlx = speak(run_cli, ckpt, tmp_path / "mlx.wav")
    p2, f32 = speak(run_cli, ckpt, tmp_path / "f32.wav", "--code-decoder-backend", "onnx-f32", "--workers", "2")
    assert "one at a time" in p2.err and "MLX" in p2.err
    assert mlx.size > 0
    np.testing.assert_allclose(f32, mlx, atol=1e-4)        # same codes; float32 summation order only
    _, streamed = speak(run_cli, ckpt, tmp_path / "s.wav", "--code-decoder-backend", "onnx-f32", "--stream")
    np.testing.assert_allclose(streamed, f32, atol=1e-4)
    _, int8 = speak(run_cli, ckpt, tmp_path / "i8.wav", "--code-decoder-backend", "onnx")
    assert int8.size > 0 and np.isfinite(int8).all()
