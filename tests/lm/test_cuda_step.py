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


def test_the_step_writes_the_kernels_keys_and_values_into_the_caches(talker, monkeypatch):
    """The decoder's side of the kernel (inputs, cache writes, offsets) with a stand-in for the
    kernel that returns recognisable keys/values; the kernel itself runs only on a GPU."""
    import mlx.core as mx

    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_frame, "multiprocessors", lambda: 132)
    seen = {}

    def fake(layers):
        def run(inputs, template, grid, threadgroup, output_shapes, output_dtypes, init_value):
            seen.update(pos=int(inputs[1].item()), n_inputs=len(inputs), template=dict(template))
            (B, V), (_, H), kshape, _, _ = output_shapes
            logits = mx.zeros((B, V))
            hidden = mx.ones((B, H))
            knew = mx.full(kshape, 7.0)
            vnew = mx.full(kshape, -7.0)
            return logits, hidden, knew, vnew, mx.zeros(output_shapes[4])
        return run

    monkeypatch.setattr(cuda_step, "_kernel", fake)
    monkeypatch.setattr(MLXCodeDecoder, "step_kernel", True)
    dec = MLXCodeDecoder(talker, compiled=True)
    H = talker.args.hidden_size
    cache = dec.new_cache()
    mx.eval(dec.prefill(mx.random.normal((1, 5, H)), cache))
    logits, hidden = dec.step(mx.random.normal((1, 1, H)), cache)
    mx.eval(logits, hidden)
    L = len(talker.model.layers)
    assert seen["pos"] == 5 and seen["n_inputs"] == 2 + 10 * L + 4 and seen["template"]["L"] == L
    assert all(c.offset == 6 for c in cache)
    for c in cache:
        assert float(c.keys[..., 5, :].min().item()) == 7.0 and float(c.values[..., 5, :].max().item()) == -7.0
        assert float(mx.abs(c.keys[..., 5:6, :] - 7.0).max().item()) == 0.0
        assert float(mx.abs(c.keys[..., :5, :]).max().item()) > 0        # the prefill's positions kept
    assert float(hidden.min().item()) == 1.0
