"""Shared fixtures: the embedded joe-medium voice, our converted model, the onnxruntime reference."""
from __future__ import annotations

import json
from pathlib import Path

import ttscli  # noqa: F401  (first: preloads OpenBLAS before mlx is imported)

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "piper"


@pytest.fixture(scope="session")
def voice_dir() -> Path:
    from ttscli.models.piper import default_voice_dir
    return default_voice_dir()


@pytest.fixture(scope="session")
def id_map(voice_dir) -> dict:
    return json.loads((voice_dir / "en_US-joe-medium.onnx.json").read_text(encoding="utf-8"))["phoneme_id_map"]


@pytest.fixture(scope="session")
def converted(voice_dir, tmp_path_factory) -> Path:
    from ttscli.models.piper import convert_onnx
    return convert_onnx(voice_dir / "en_US-joe-medium.onnx", tmp_path_factory.mktemp("piper") / "mlx")


@pytest.fixture(scope="session")
def model(converted):
    from ttscli.models.piper import load_converted
    return load_converted(converted)[0]


@pytest.fixture(scope="session")
def onnx_ref(voice_dir):
    pytest.importorskip("onnxruntime")
    from ttscli.models.piper.reference import OnnxVits
    return OnnxVits(voice_dir / "en_US-joe-medium.onnx")
