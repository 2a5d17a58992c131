"""Core ML packages built once per session from the tiny upstream fixture.

tests/fixtures/coreml/ is written by scripts/goldens/qwen3_tts_coreml.py (upstream qwen_tts
classes): a tiny checkpoint in the published layout and goldens.npz.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from coreml_common import CAPACITY, CHECKPOINT, FIXTURE, MODEL_ID


@pytest.fixture(scope="session")
def goldens():
    return dict(np.load(FIXTURE / "goldens.npz"))


def _build(tmp_path_factory, name, **kw):
    from ttscli.models.qwen3_tts.coreml_export import export_coreml

    out = tmp_path_factory.mktemp(name)
    return out, export_coreml(CHECKPOINT, out, model_id=MODEL_ID, capacity=CAPACITY, **kw)


@pytest.fixture(scope="session")
def packages(tmp_path_factory):
    """(folder, manifest) of the default export: fp16 compute, fp16 weights."""
    return _build(tmp_path_factory, "coreml-fp16")


@pytest.fixture(scope="session")
def packages_8bit(tmp_path_factory):
    return _build(tmp_path_factory, "coreml-int8", weights_8bit=True)


@pytest.fixture(scope="session")
def packages_fp32(tmp_path_factory):
    """fp32 compute: isolates graph errors from fp16 rounding (weights are still fp16)."""
    return _build(tmp_path_factory, "coreml-fp32", precision="float32")
