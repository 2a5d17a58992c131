"""The one-kernel decode step (ttscli.lm.cuda_step): when it may run, and what the decoder hands
it and keeps (the kernel's numerics: scripts/gpu_check_step.py on a GPU)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ttscli.lm import MLXCodeDecoder, cuda_kernels, cuda_step
from ttscli.models.qwen3_tts.load import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "parity" / "qwen3-tiny-base"


@pytest.fixture(scope="module")
def talker():
    model, _ = load_model(FIX)
    return model.talker


def test_never_off_cuda(talker):
    lm, head = talker.step_parts()
    assert cuda_step.unsupported(lm, head, 1) == "not on MLX's CUDA backend"
    assert MLXCodeDecoder(talker, compiled=False)._step_kernel(1) is None
    assert MLXCodeDecoder(talker, compiled=True)._step_kernel(1) is None


def test_the_gate_on_cuda(talker, monkeypatch):
    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_step, "multiprocessors", lambda: 132)
    lm, head = talker.step_parts()
    assert cuda_step.unsupported(lm, head, 1) is None
    assert "rows" in cuda_step.unsupported(lm, head, cuda_step.MAX_ROWS + 1)


def test_the_step_hands_the_kernel_one_cache_and_keeps_its_views(talker, monkeypatch):
    """The decoder's side of the kernel (inputs, the stacked cache in and out, the caches'
    views and offsets) with a stand-in that does what the kernel does to the cache (copies the
    earlier positions, writes this one with recognisable keys/values); the kernel itself runs
    only on a GPU (scripts/gpu_check_step.py)."""
    import mlx.core as mx

    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_step, "multiprocessors", lambda: 132)
    seen, outs = [], []

    def run(inputs, template, grid, threadgroup, output_shapes, output_dtypes, init_value):
        pos = int(inputs[1].item())
        cache = inputs[2 + len(cuda_step.KINDS)]
        seen.append(dict(pos=pos, n_inputs=len(inputs), template=dict(template), cache=cache))
        (B, V), (_, H), cshape, _ = output_shapes
        assert cshape == cache.shape
        out = mx.zeros(cshape)
        out[..., :pos, :] = cache[..., :pos, :]
        out[:, 0, ..., pos, :] = 7.0 + pos
        out[:, 1, ..., pos, :] = -7.0 - pos
        outs.append(out)
        return mx.zeros((B, V)), mx.ones((B, H)), out, mx.zeros(output_shapes[3])

    monkeypatch.setattr(cuda_step, "_kernel", lambda: run)
    talker.__dict__.pop("_ttscli_step_kernels", None)      # the verdict of a test run off CUDA
    monkeypatch.setattr(MLXCodeDecoder, "step_kernel", True)
    dec = MLXCodeDecoder(talker, compiled=True)
    H = talker.args.hidden_size
    L = len(talker.model.layers)
    cache = dec.new_cache()
    mx.eval(dec.prefill(mx.random.normal((1, 5, H)), cache))
    before = [mx.array(c.keys[..., :5, :]) for c in cache]
    for _ in range(2):
        logits, hidden = dec.step(mx.random.normal((1, 1, H)), cache)
        mx.eval(logits, hidden)
    assert [s["pos"] for s in seen] == [5, 6]
    assert seen[0]["n_inputs"] == 2 + len(cuda_step.KINDS) + 1 + 4 and seen[0]["template"]["L"] == L
    assert seen[0]["cache"].shape[:2] == (L, 2)
    assert all(c.offset == 7 for c in cache)
    assert seen[1]["cache"] is outs[0]                         # the first step's output, not a re-stack;
    for i, c in enumerate(cache):                                # the caches are views of the last one
        assert c.keys.shape == cache[0].keys.shape
        assert float(mx.abs(c.keys[..., 5, :] - 7.0 - 5).max().item()) == 0.0
        assert float(mx.abs(c.values[..., 6, :] + 7.0 + 6).max().item()) == 0.0
        assert float(mx.abs(c.keys[..., :5, :] - before[i]).max().item()) == 0.0   # the prefill kept
    assert cuda_step.LMStepKernel._stacked(cache) is outs[1]  # what the next step would get
    cache[0].keys = cache[0].keys + 0                            # a cache changed behind its back: stacked again
    assert cuda_step.LMStepKernel._stacked(cache) is not outs[1]
    assert float(hidden.min().item()) == 1.0
