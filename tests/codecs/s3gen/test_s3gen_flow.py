"""S3Gen's flow (conformer encoder + causal CFM) against upstream chatterbox-tts 0.1.7 goldens.

Fixtures from scripts/goldens/chatterbox_s3gen.py: a tiny CausalMaskedDiffWithXvec (width 64,
2+4 conformer blocks, estimator 64 channels with 2+2x2 transformer blocks; every structural
feature of the real one) in the published ``flow.*`` layout, prompt and tokens, upstream's
encoder output, the CFM noise it drew, and the mel it made (10 Euler steps, CFG 0.7).
"""
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.checkpoint import load_strict
from ttscli.codecs.s3gen.flow import CausalMaskedDiffWithXvec, FlowArgs

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "chatterbox" / "s3gen"
TINY = FlowArgs(input_size=64, attention_heads=2, linear_units=128, num_blocks=2, dec_channels=64,
                dec_heads=2, dec_head_dim=32, dec_n_blocks=2, dec_mid_blocks=2)


@pytest.fixture(scope="module")
def flow():
    w = mx.load(str(FIX / "flow_tiny.safetensors"))
    return load_strict(CausalMaskedDiffWithXvec(TINY), {k.removeprefix("flow."): v for k, v in w.items()},
                       source="flow_tiny.safetensors")


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(FIX / "flow_tiny.npz"))


def test_encoder(flow, golden):
    toks = mx.array(np.concatenate([golden["prompt_token"], golden["token"]]))
    h = np.array(flow.encode(toks))
    assert h.shape == golden["encoder_out"].shape
    assert np.abs(h - golden["encoder_out"]).max() <= 1e-4


def _mel(flow, g, **kw):
    return flow(mx.array(g["token"]), mx.array(g["prompt_token"]), mx.array(g["prompt_feat"]),
                mx.array(g["embedding"]), **kw)


def test_mel_with_upstream_noise(flow, golden):
    mel = np.array(_mel(flow, golden, noise=mx.array(golden["noise"].T)))
    assert mel.shape == golden["mel"].T.shape == (2 * len(golden["token"]), 80)
    assert np.abs(mel - golden["mel"].T).max() <= 1e-4


def test_steps_and_noise_matter(flow, golden):
    noise = mx.array(golden["noise"].T)
    ref = np.array(_mel(flow, golden, noise=noise))
    assert np.abs(np.array(_mel(flow, golden, noise=noise, n_timesteps=4)) - ref).max() > 1e-3
    assert np.abs(np.array(_mel(flow, golden, key=mx.random.key(3))) - ref).max() > 1e-3


def test_partial_drops_the_lookahead_frames(flow, golden):
    mel = _mel(flow, golden, noise=mx.array(golden["noise"].T), finalize=False)
    assert mel.shape[0] == 2 * (len(golden["token"]) - 3)


def test_cpu_activations_match_float64():
    """GELU (erf), Mish and SiLU as the CPU runs them (from fast_exp) against float64 formulas."""
    import math

    from ttscli.codecs.s3gen.flow import gelu, mish, silu

    x = np.linspace(-30, 30, 120001).astype(np.float32)
    xd = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    softplus = np.where(xd > 30, xd, np.log1p(np.exp(np.minimum(xd, 30))))
    refs = {gelu: 0.5 * xd * (1 + erf(xd / math.sqrt(2))), mish: xd * np.tanh(softplus),
            silu: xd / (1 + np.exp(-xd))}
    for fn, ref in refs.items():
        got = np.array(fn(mx.array(x))).astype(np.float64)
        # absolute near 0, relative for large |x| (float32 rounding of x itself is ~1e-7 relative)
        assert np.all(np.abs(got - ref) <= 1e-6 + 1e-6 * np.abs(ref)), fn.__name__
