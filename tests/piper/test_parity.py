"""Our MLX VITS against onnxruntime running the published en_US-joe-medium.onnx."""
from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from ttscli.models.piper.phonemize import text_to_ids

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Wait, what did you say?",
]


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("text", SENTENCES)
def test_noiseless_waveform_matches_onnx(model, onnx_ref, id_map, text):
    ids = text_to_ids(text, id_map)[0]
    ref = onnx_ref(ids, 0.0, 1.0, 0.0)
    ours = np.array(model(mx.array([ids]), noise_scale=0.0, length_scale=1.0, noise_w=0.0))
    assert ours.shape == ref.shape
    assert rel_l2(ours, ref) <= 1e-3


def test_same_noise_gives_same_waveform(model, onnx_ref, id_map):
    """Default noise scales with the reference's RandomNormalLike fed the noise we draw."""
    ids = text_to_ids("She sells sea shells by the sea shore.", id_map)[0]
    rng = np.random.default_rng(7)
    dp_noise = rng.standard_normal((1, len(ids), 2)).astype(np.float32)            # ours: [1, T, 2]
    m_p, logs_p, frames = model.durations(mx.array([ids]), 0.8, 1.0, noise=mx.array(dp_noise))
    n_frames = int(frames.sum())
    prior = rng.standard_normal((1, n_frames, 192)).astype(np.float32)              # ours: [1, F, C]
    ours = np.array(model.decode(model.latents(m_p, logs_p, frames, 0.667, noise=mx.array(prior)))[0])
    ref = onnx_ref(ids, 0.667, 1.0, 0.8, dp_noise=dp_noise.transpose(0, 2, 1),
                   prior_noise=prior.transpose(0, 2, 1))
    assert ours.shape == ref.shape == (n_frames * 256,)
    assert rel_l2(ours, ref) <= 1e-3


def test_length_scale_and_durations(model, onnx_ref, id_map):
    ids = text_to_ids("Numbers like 42 and 1,000 take longer to say.", id_map)[0]
    for length_scale in (0.7, 1.5):
        ref = onnx_ref(ids, 0.0, length_scale, 0.0)
        _, _, frames = model.durations(mx.array([ids]), 0.0, length_scale)
        assert int(frames.sum()) * 256 == ref.size
