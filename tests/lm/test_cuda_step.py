"""The one-kernel decode step (ttscli.lm.cuda_step): when it may run. Off by default
(MLXCodeDecoder.step_kernel) until scripts/gpu_check_step.py has checked it on a GPU."""
from __future__ import annotations

from pathlib import Path

import pytest

from ttscli.lm import MLXCodeDecoder, cuda_frame, cuda_kernels, cuda_step
from ttscli.lm.model import fuse_projections
from ttscli.models.qwen3_tts.loader import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "parity" / "qwen3-tiny-base"


@pytest.fixture(scope="module")
def talker():
    model, _ = load_model(FIX)
    return model.talker


def test_off_cuda_and_off_by_default(talker):
    lm, head = talker.step_parts()
    assert cuda_step.unsupported(lm, head, 1) == "not on MLX's CUDA backend"
    assert MLXCodeDecoder.step_kernel is False
    assert MLXCodeDecoder(talker, compiled=False)._step_kernel(1) is None


def test_the_gate_on_cuda(talker, monkeypatch):
    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_frame, "multiprocessors", lambda: 132)
    lm, head = talker.step_parts()
    if lm.layers[0].self_attn._fused_now() is None:
        assert "fused" in cuda_step.unsupported(lm, head, 1)
    fuse_projections(talker)
    assert cuda_step.unsupported(lm, head, 1) is None
    assert "rows" in cuda_step.unsupported(lm, head, cuda_step.MAX_ROWS + 1)
