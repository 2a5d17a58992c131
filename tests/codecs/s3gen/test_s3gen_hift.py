"""HiFT (S3Gen's vocoder) against upstream chatterbox-tts 0.1.7 goldens.

Fixtures from scripts/goldens/chatterbox_s3gen.py: a tiny HiFTGenerator (32 base channels, the
real rates, kernels, harmonics and iSTFT) in the published ``mel2wav.*`` layout, a random mel,
and upstream's F0, source, waveform and the random draws its SineGen made.
"""
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.checkpoint import load_strict
from ttscli.errors import CheckpointError
from ttscli.codecs.s3gen.hift import (
    HiFTArgs,
    HiFTGenerator,
    SourceDraws,
    fold_weight_norm,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "chatterbox" / "s3gen"


def _weights():
    w = mx.load(str(FIX / "hift_tiny.safetensors"))
    return fold_weight_norm({k.removeprefix("mel2wav."): v for k, v in w.items()})


@pytest.fixture(scope="module")
def hift():
    m = HiFTGenerator(HiFTArgs(base_channels=32, f0_channels=32))
    return load_strict(m, _weights(), source="hift_tiny.safetensors")


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(FIX / "hift_tiny.npz"))


def test_f0_and_source(hift, golden):
    mel = mx.array(golden["mel"].T)
    draws = SourceDraws(mx.array(golden["phase"]), mx.array(golden["sine_noise"].T))
    f0, s = hift.source(mel, draws)
    assert (golden["f0"] < 10).any() and (golden["f0"] > 10).any()   # voiced and unvoiced frames
    np.testing.assert_allclose(np.array(f0), golden["f0"], rtol=2e-6, atol=2e-4)
    assert np.abs(np.array(s) - golden["source"]).max() <= 1e-4


def test_decode_from_golden_source(hift, golden):
    wav = hift.decode(mx.array(golden["mel"].T), mx.array(golden["source"]))
    assert wav.shape == golden["wav"].shape
    assert np.abs(np.array(wav) - golden["wav"]).max() <= 1e-5


def test_end_to_end_with_recorded_draws(hift, golden):
    draws = SourceDraws(mx.array(golden["phase"]), mx.array(golden["sine_noise"].T))
    wav, _ = hift(mx.array(golden["mel"].T), draws)
    assert np.abs(np.array(wav) - golden["wav"]).max() <= 1e-4


def test_fresh_draws_change_only_the_source(hift, golden):
    mel = mx.array(golden["mel"].T)
    a, _ = hift(mel, key=mx.random.key(0))
    b, _ = hift(mel, key=mx.random.key(0))
    c, _ = hift(mel, key=mx.random.key(1))
    assert np.array_equal(np.array(a), np.array(b))
    assert not np.array_equal(np.array(a), np.array(c))


def test_missing_tensor_is_one_line():
    w = _weights()
    w.pop("conv_post.weight")
    with pytest.raises(CheckpointError, match="conv_post.weight"):
        load_strict(HiFTGenerator(HiFTArgs(base_channels=32, f0_channels=32)), w, source="x")
