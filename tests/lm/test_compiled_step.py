"""The GPU decode path of the shared LM, checked on the CPU: fused q/k/v and gate/up
projections, the compiled fixed-capacity step (SlotCache) and the graph-size figure the bench
reports.  Each must compute exactly what the plain path computes. ``cuda``-marked (MLX's CUDA
backend only): our CUDA kernels (ttscli.lm.cuda_kernels) against the same step without them."""
from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from test_model import LLAMA3, HeadModel, build  # tests/lm is on sys.path (pytest rootdir-less import)

from ttscli.lm import MLXCodeDecoder, fuse_projections, graph_primitives

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "parity"


def run_steps(dec: MLXCodeDecoder, x: mx.array, prefill: int, block: int) -> np.ndarray:
    cache = dec.new_cache()
    for c in cache:
        c.step = block       # small storage blocks, so the steps cross several growths
    out = [dec.prefill(x[:, :prefill], cache)[0]]
    for i in range(prefill, x.shape[1]):
        logits, h = dec.step(x[:, i:i + 1], cache)
        mx.eval(logits, h)
        out.append(logits)
    assert cache[0].offset == x.shape[1]
    return np.array(mx.stack(out))


@pytest.mark.parametrize("model_type,bias", [("qwen3", False), ("llama", True)])
def test_compiled_fused_step_equals_plain_step(model_type, bias):
    x = mx.random.normal((1, 29, 64), key=mx.random.key(4))
    model = HeadModel(build(model_type, bias))
    plain = run_steps(MLXCodeDecoder(model), x, 5, 8)      # before the compiled decoder fuses it
    compiled = run_steps(MLXCodeDecoder(model, compiled=True), x, 5, 8)
    np.testing.assert_allclose(compiled, plain, rtol=1e-5, atol=1e-5)
    assert np.abs(plain).max() > 0.1


def test_fused_projections_follow_reloaded_weights():
    m = build("qwen3", seed=0)
    fuse_projections(m)
    ids = mx.array([[1, 2, 3, 4]])
    fused = np.array(m(ids))
    np.testing.assert_allclose(fused, np.array(build("qwen3", seed=0)(ids)), rtol=1e-5, atol=1e-5)
    # new weights after fusing: the stale fused copy must not be used
    other = build("qwen3", seed=1)
    m.load_weights(list(dict(__import__("mlx.utils").utils.tree_flatten(other.parameters())).items()))
    np.testing.assert_allclose(np.array(m(ids)), np.array(other(ids)), rtol=1e-5, atol=1e-5)
    assert np.abs(np.array(other(ids)) - fused).max() > 0.1


def test_graph_primitives_counts_the_lazy_graph():
    a, b, c = mx.ones((3,)), mx.ones((3,)), mx.ones((3,))
    mx.eval(a, b, c)
    assert graph_primitives((a + b) * c) == {"primitives": 2, "kernels": 2}
    assert graph_primitives((a + b).reshape(1, 3)) == {"primitives": 2, "kernels": 1}
    fused = mx.compile(lambda a, b, c: mx.exp((a + b) * c))
    assert graph_primitives(fused(a, b, c))["kernels"] == 1


def test_qwen3_frames_with_the_compiled_decoder_are_unchanged():
    """Greedy and sampled frames of the tiny Qwen3-TTS (random weights) through the compiled
    talker step and compiled codebook-0 draw equal the plain loop's, frame for frame."""
    from ttscli.models.qwen3_tts.config import GenerationConfig
    from ttscli.models.qwen3_tts.loop import LoopConfig, generate_frames
    from ttscli.models.qwen3_tts.model import build_random
    from ttscli.models.qwen3_tts.prompt import Prompt

    model = build_random(json.loads((FIXTURES / "qwen3-tiny-base" / "config.json").read_text()), "float32")
    H = model.talker.args.hidden_size
    x = mx.random.normal((1, 12, H), key=mx.random.key(0)) * 0.1
    for over in ({"do_sample": False, "subtalker_do_sample": False}, None):
        cfg = LoopConfig.from_generation_config(GenerationConfig(), over, max_frames=20)
        cfg.ignore_eos = True
        frames = {}
        for compiled in (False, True):
            dec = MLXCodeDecoder(model.talker, compiled=compiled)
            model.talker.code_predictor.reset_compiled()
            frames[compiled] = np.stack(list(generate_frames(model.talker, dec, Prompt(x, x[:, :0], x[:, :1]),
                                                             cfg, seed=3)))
        assert frames[True].shape == (20, 16)
        np.testing.assert_array_equal(frames[True], frames[False])


def test_one_query_attention_equals_the_fused_kernel():
    """The GPU's masked one-query attention (GQA by blocks, boolean mask per row) against MLX's
    fused kernel, for a fixed-capacity cache's mask and a batch's per-row padding mask."""
    from ttscli.lm.model import _one_query_attention

    keys = mx.random.split(mx.random.key(7), 3)
    q = mx.random.normal((2, 8, 1, 16), key=keys[0])
    k = mx.random.normal((2, 2, 12, 16), key=keys[1])
    v = mx.random.normal((2, 2, 12, 16), key=keys[2])
    for mask in ((mx.arange(12) <= 6)[None, None, None, :],
                 mx.array([[True] * 12, [False] * 3 + [True] * 9])[:, None, None, :]):
        ours = _one_query_attention(q, k, v, 0.25, mask)
        ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask)
        np.testing.assert_allclose(np.array(ours), np.array(ref), rtol=1e-5, atol=1e-5)


@pytest.fixture
def flat_decode():
    """DecoderLM.flat_decode forced on (it defaults to on only on a GPU), restored after."""
    from ttscli.lm import DecoderLM

    yield lambda on: setattr(DecoderLM, "flat_decode", on)
    DecoderLM.flat_decode = None


@pytest.mark.parametrize("model_type,bias", [("qwen3", False), ("llama", True)])
@pytest.mark.parametrize("compiled", [False, True])
def test_flat_one_position_layers_equal_the_3d_path(flat_decode, model_type, bias, compiled):
    """One-position calls on [B, hidden] rows (the GPU default) give the logits of the
    [B, 1, hidden] path, through the plain cache and through the compiled SlotCache step, and
    the compiled step's graph loses the flatten/unflatten and transpose nodes."""
    x = mx.random.normal((1, 21, 64), key=mx.random.key(5))
    model = HeadModel(build(model_type, bias))
    out, nodes = {}, {}
    for flat in (False, True):
        flat_decode(flat)
        dec = MLXCodeDecoder(model, compiled=compiled)
        out[flat] = run_steps(dec, x, 4, 8)
        cache = dec.new_cache()
        dec.prefill(x[:, :4], cache)
        if compiled:
            keys, values = [c.keys for c in cache], [c.values for c in cache]
            logits, hidden, _, _ = dec._step(x[:, 4:5], mx.array(4, mx.int32), keys, values)
        else:
            logits, hidden = dec.step(x[:, 4:5], cache)
        nodes[flat] = graph_primitives(logits, hidden)["primitives"]
    np.testing.assert_allclose(out[True], out[False], rtol=1e-5, atol=1e-6)
    assert np.abs(out[False]).max() > 0.1
    assert nodes[True] < nodes[False], nodes


KERNEL_CASES = {"qwen3": ("qwen3", {}), "llama": ("llama", {}),
                "qwen3-d128": ("qwen3", {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                                         "head_dim": 128, "intermediate_size": 512}),
                "llama3-rope": ("llama", {"rope_scaling": LLAMA3}),
                "llama-d64": ("llama", {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
                                        "head_dim": 64, "intermediate_size": 512})}


@pytest.mark.cuda
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", list(KERNEL_CASES))
def test_our_cuda_kernels_equal_the_step_without_them(case, compiled, monkeypatch):
    """The q/k-norm + RoPE, one-query attention and add + RMSNorm kernels, Qwen3 blocks (q/k norms)
    and Llama blocks (none), tiny and real head sizes, plain cache and compiled step: the logits of
    the step without them, within the GPU GEMMs' own distance from float32 (~3e-4)."""
    from ttscli.lm import DecoderLM
    from ttscli.lm.model import LMAttention

    model_type, extra = KERNEL_CASES[case]
    x = mx.random.normal((1, 21, extra.get("hidden_size", 64)), key=mx.random.key(5))
    model = HeadModel(build(model_type, False, **extra))
    out = {}
    for on in (False, True):
        for switch in ((LMAttention, "fused_qk_rope"), (LMAttention, "fused_attention"), (DecoderLM, "fused_norms")):
            monkeypatch.setattr(*switch, None if on else False)
        out[on] = run_steps(MLXCodeDecoder(model, compiled=compiled), x, 4, 8)
    assert np.abs(out[False]).max() > 0.1
    assert np.abs(out[True] - out[False]).max() < 1e-3


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(2, 8, 2, 40, 16), (2, 16, 8, 300, 128), (1, 16, 16, 257, 64)])
@pytest.mark.parametrize("masking", ["slots", "padding"])
def test_the_attention_kernel_against_float32_on_the_cpu(shape, masking):
    """The one-query attention kernel for a fixed-capacity cache's mask and a batch's padding
    mask, against MLX's attention in float32 on the CPU."""
    from ttscli.lm import cuda_kernels

    B, H, Hk, S, D = shape
    keys = mx.random.split(mx.random.key(7), 3)
    q = mx.random.normal((B, H, 1, D), key=keys[0])
    k = mx.random.normal((B, Hk, S, D), key=keys[1])
    v = mx.random.normal((B, Hk, S, D), key=keys[2])
    if masking == "slots":
        mask = (mx.arange(S) <= S // 2)[None, None, None, :]
    else:
        mask = mx.array([[True] * S] + [[False] * 3 + [True] * (S - 3)] * (B - 1))[:, None, None, :]
    with mx.stream(mx.cpu):
        ref = mx.fast.scaled_dot_product_attention(q, k, v, scale=D ** -0.5, mask=mask)
        mx.eval(ref)
    assert float(mx.abs(cuda_kernels.one_query_attention(q, k, v, D ** -0.5, mask) - ref).max().item()) < 1e-3
