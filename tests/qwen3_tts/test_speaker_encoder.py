"""Qwen3-TTS speaker encoder vs goldens from the upstream qwen-tts code (scripts/goldens/qwen3_encoders.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import ttscli  # noqa: F401  (loads OpenBLAS before mlx)
import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import CheckpointError
from ttscli.models.qwen3_tts.speaker_encoder import (
    SpeakerEncoder,
    SpeakerEncoderConfig,
    build_random_speaker_encoder,
    load_speaker_encoder,
    mel_spectrogram,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts" / "speaker_encoder"


@pytest.fixture(scope="module")
def golden():
    return np.load(FIX / "golden.npz")


@pytest.fixture(scope="module")
def model():
    return load_speaker_encoder(FIX)


def _cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("tag", ["a", "b"])
def test_mel_matches_upstream(golden, tag):
    mel = np.array(mel_spectrogram(golden[f"wav_{tag}"]))
    ref = golden[f"mel_{tag}"]
    assert mel.shape == ref.shape
    assert np.abs(mel - ref).max() < 2e-4
    # the clip has silent frames (log clamp) and loud ones: make sure both ranges are covered
    assert ref.min() < -11 and ref.max() > 0


@pytest.mark.parametrize("tag", ["a", "b"])
def test_embedding_matches_upstream(model, golden, tag):
    emb = model.embed(golden[f"wav_{tag}"])
    assert emb.dtype == mx.float32
    emb = np.array(emb)
    ref = golden[f"emb_{tag}"]
    assert emb.shape == ref.shape == (model.config.enc_dim,)
    assert np.abs(emb - ref).max() < 1e-3 * np.abs(ref).max()
    assert _cos(emb, ref) > 0.99999


def test_embeddings_differ_between_clips(golden):
    # guards against a degenerate fixture where every input maps to (nearly) the same vector,
    # which would make the tolerance above meaningless
    a, b = golden["emb_a"], golden["emb_b"]
    assert _cos(a, b) < 0.99
    assert np.abs(a - b).max() > 100 * 1e-3 * np.abs(a).max()


def test_accepts_mx_input(model, golden):
    a = np.array(model.embed(mx.array(golden["wav_b"])))
    np.testing.assert_allclose(a, np.array(model.embed(golden["wav_b"])), rtol=0, atol=1e-6)


def test_forward_from_upstream_mel(model, golden):
    emb = np.array(model(mx.array(golden["mel_a"])[None])[0])
    assert np.abs(emb - golden["emb_a"]).max() < 1e-3 * np.abs(golden["emb_a"]).max()


def test_config_defaults_and_unknown_keys():
    cfg = SpeakerEncoderConfig.from_dict({"enc_dim": 2048, "sample_rate": 24000, "something_new": 1})
    assert cfg.enc_dim == 2048
    assert cfg.enc_channels == [512, 512, 512, 512, 1536]
    assert cfg.enc_kernel_sizes == [5, 3, 3, 3, 1] and cfg.enc_dilations == [1, 2, 3, 4, 1]
    assert (cfg.enc_attention_channels, cfg.enc_res2net_scale, cfg.enc_se_channels, cfg.mel_dim) == (128, 8, 128, 128)


def test_parameter_names_match_real_layout():
    from mlx.utils import tree_flatten

    model = SpeakerEncoder(SpeakerEncoderConfig(enc_dim=1024))
    shapes = {k: tuple(v.shape) for k, v in tree_flatten(model.parameters())}
    # a few keys from the published 0.6B-Base layout (convs in PyTorch layout [out, in, k], as published)
    assert shapes["blocks.0.conv.weight"] == (512, 128, 5)
    assert shapes["blocks.3.res2net_block.blocks.6.conv.weight"] == (64, 64, 3)
    assert shapes["blocks.2.se_block.conv2.weight"] == (512, 128, 1)
    assert shapes["asp.tdnn.conv.weight"] == (128, 4608, 1)
    assert shapes["fc.weight"] == (1024, 3072, 1) and shapes["fc.bias"] == (1024,)
    assert len(shapes) == 2 + 3 * (4 + 14 + 4) + 2 + 4 + 2  # 76 tensors as in LAYOUT.md


def _copy_fixture(tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(FIX, dst)
    return dst


def test_strict_loading_names_the_problem(tmp_path):
    path = _copy_fixture(tmp_path)
    weights = mx.load(str(path / "model.safetensors"))
    # other root tensors (talker.*) are ignored
    extra = dict(weights, **{"talker.codec_head.weight": mx.zeros((4, 4), dtype=mx.bfloat16)})
    mx.save_safetensors(str(path / "model.safetensors"), extra)
    load_speaker_encoder(path)

    missing = {k: v for k, v in weights.items() if k != "speaker_encoder.fc.bias"}
    mx.save_safetensors(str(path / "model.safetensors"), missing)
    with pytest.raises(CheckpointError, match="speaker_encoder.fc.bias"):
        load_speaker_encoder(path)

    bad = dict(weights, **{"speaker_encoder.asp.conv.bias": mx.zeros((7,))})
    mx.save_safetensors(str(path / "model.safetensors"), bad)
    with pytest.raises(CheckpointError, match="asp.conv.bias"):
        load_speaker_encoder(path)

    unexpected = dict(weights, **{"speaker_encoder.blocks.9.conv.weight": mx.zeros((2, 2, 2))})
    mx.save_safetensors(str(path / "model.safetensors"), unexpected)
    with pytest.raises(CheckpointError, match="blocks.9.conv.weight"):
        load_speaker_encoder(path)


def test_config_without_speaker_encoder_is_rejected(tmp_path):
    path = _copy_fixture(tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    del cfg["speaker_encoder_config"]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="Base"):
        load_speaker_encoder(path)


def test_parameters_are_the_published_tensors(model):
    """Convs keep the checkpoint's PyTorch layout [out, in, k]: every tensor loads as published."""
    from mlx.utils import tree_flatten

    published = {k[len("speaker_encoder."):]: v.shape for k, v in mx.load(str(FIX / "model.safetensors")).items()
                 if k.startswith("speaker_encoder.")}
    ours = {k: v.shape for k, v in tree_flatten(model.parameters())}
    assert ours == published
    c = model.config
    assert ours["blocks.0.conv.weight"] == (c.enc_channels[0], c.mel_dim, c.enc_kernel_sizes[0])   # [out, in, k]


def test_random_real_dims_shape():
    model = build_random_speaker_encoder(enc_dim=2048)
    wav = np.sin(np.arange(24000) * 0.05).astype(np.float32) * 0.3
    emb = model.embed(wav)
    assert emb.shape == (2048,)
    assert bool(mx.all(mx.isfinite(emb)))


def test_too_short_audio_is_a_clear_error(model):
    from ttscli.errors import AudioInputError

    # 4 mel frames: upstream's reflect padding (dilation 4) fails there too
    with pytest.raises(AudioInputError, match="too short"):
        model.embed(np.zeros(1279, np.float32))
    assert model.embed(np.full(1280, 0.1, np.float32)).shape == (model.config.enc_dim,)
