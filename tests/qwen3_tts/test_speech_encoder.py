"""Qwen3-TTS speech-tokenizer encoder vs goldens from the upstream Qwen3TTSTokenizer
(scripts/goldens/qwen3_encoders.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import ttscli  # noqa: F401  (loads OpenBLAS before mlx)
import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import AudioInputError, CheckpointError
from ttscli.codecs.qwen3_12hz.encoder import (
    EncoderArgs,
    SpeechEncoder,
    build_random_speech_encoder,
    load_speech_encoder,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts" / "tokenizer_enc"


@pytest.fixture(scope="module")
def golden():
    return np.load(FIX / "golden.npz")


@pytest.fixture(scope="module")
def model():
    return load_speech_encoder(FIX)


@pytest.mark.parametrize("tag", ["a", "b", "c"])
def test_codes_equal_upstream(model, golden, tag):
    wav = golden[f"wav_{tag}"]
    codes = model.encode(wav)
    ref = golden[f"codes_{tag}"]
    assert codes.dtype == np.int32
    assert codes.shape == ref.shape == (-(-len(wav) // 1920), 16)
    np.testing.assert_array_equal(codes, ref)


def test_golden_codes_are_not_degenerate(golden):
    # every level uses many entries, so equality above tests real nearest-neighbour choices
    codes = golden["codes_a"]
    assert min(len(set(codes[:, q])) for q in range(codes.shape[1])) >= 10


def test_latent_matches_upstream(model, golden):
    h = np.array(model.hidden(mx.array(golden["wav_a"])[None])[0])
    ref = golden["hidden_a"]
    assert h.shape == ref.shape
    assert np.abs(h - ref).max() < 1e-4 * np.abs(ref).max()


def test_accepts_mx_input_and_is_causal(model, golden):
    wav = golden["wav_a"]
    full = model.encode(mx.array(wav))
    np.testing.assert_array_equal(full, golden["codes_a"])
    # causal convs + causal attention: the first frames do not depend on later audio
    head = model.encode(wav[: 1920 * 20])
    np.testing.assert_array_equal(head[:19], full[:19])


@pytest.mark.parametrize("chunk_hops", [None, 1, 3])
def test_chunked_seanet_equals_whole_clip(model, golden, chunk_hops):
    # wav_b is not a whole number of hops: the last chunk carries the right padding
    wav = mx.array(golden["wav_b"])[None]
    ref = model.hidden(wav, chunk_hops=None)
    out = model.hidden(wav, chunk_hops=chunk_hops)
    assert out.shape == ref.shape
    assert float(mx.abs(out - ref).max()) <= 1e-5 * float(mx.abs(ref).max())
    codes = model.quantizer.encode(out[0], 16)[: golden["codes_b"].shape[0]]
    np.testing.assert_array_equal(np.array(codes), golden["codes_b"])


def test_empty_audio_is_rejected(model):
    with pytest.raises(AudioInputError):
        model.encode(np.zeros((0,), np.float32))


def _copy_fixture(tmp_path: Path) -> Path:
    dst = tmp_path / "speech_tokenizer"
    shutil.copytree(FIX, dst)
    return dst


def test_strict_about_encoder_keys_ignores_decoder(tmp_path):
    path = _copy_fixture(tmp_path)
    weights = mx.load(str(path / "model.safetensors"))
    assert any(k.startswith("decoder.") for k in weights)

    no_decoder = {k: v for k, v in weights.items() if not k.startswith("decoder.")}
    mx.save_safetensors(str(path / "model.safetensors"), no_decoder)
    load_speech_encoder(path)

    key = "encoder.quantizer.acoustic_residual_vector_quantizer.layers.18.codebook.embed_sum"
    missing = {k: v for k, v in weights.items() if k != key}
    mx.save_safetensors(str(path / "model.safetensors"), missing)
    with pytest.raises(CheckpointError, match="layers.18.codebook.embed_sum"):
        load_speech_encoder(path)

    shaped = dict(weights, **{"encoder.downsample.conv.weight": mx.zeros((32, 32, 3))})
    mx.save_safetensors(str(path / "model.safetensors"), shaped)
    with pytest.raises(CheckpointError, match="downsample.conv.weight"):
        load_speech_encoder(path)

    extra = dict(weights, **{"encoder.upsample.conv.weight": mx.zeros((32, 1, 4))})
    mx.save_safetensors(str(path / "model.safetensors"), extra)
    with pytest.raises(CheckpointError, match="upsample.conv.weight"):
        load_speech_encoder(path)


def test_config_mismatch_is_a_checkpoint_error(tmp_path):
    path = _copy_fixture(tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["encoder_config"]["num_hidden_layers"] = 3
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="encoder_transformer.layers.2"):
        load_speech_encoder(path)


def test_published_config_defaults_and_layout():
    from mlx.utils import tree_flatten

    # encoder_config as published in speech_tokenizer/config.json (research notes, section 2.5)
    published = {
        "_frame_rate": 12.5, "audio_channels": 1, "codebook_dim": 256, "codebook_size": 2048, "compress": 2,
        "dilation_growth_rate": 2, "head_dim": 64, "hidden_act": "gelu", "hidden_size": 512, "intermediate_size": 2048,
        "kernel_size": 7, "last_kernel_size": 3, "layer_scale_initial_scale": 0.01, "max_position_embeddings": 8000,
        "norm_eps": 1e-05, "normalize": False, "num_attention_heads": 8, "num_filters": 64, "num_hidden_layers": 8,
        "num_key_value_heads": 8, "num_quantizers": 32, "num_residual_layers": 1, "num_semantic_quantizers": 1,
        "pad_mode": "constant", "residual_kernel_size": 3, "rope_theta": 10000.0, "sampling_rate": 24000,
        "sliding_window": 250, "trim_right_ratio": 1.0, "upsample_groups": 512, "upsampling_ratios": [8, 6, 5, 4],
        "use_cache": False, "use_causal_conv": True, "use_conv_shortcut": False, "use_streaming": False,
        "vector_quantization_hidden_dimension": 256, "dtype": "float32"}
    args = EncoderArgs.from_config({"encoder_valid_num_quantizers": 16, "encode_downsample_rate": 1920,
                                    "encoder_config": published})
    defaults = EncoderArgs.from_config({})
    assert args._frame_rate == 12.5 and defaults._frame_rate is None  # both give a stride-2, k=4 downsample
    defaults._frame_rate = 12.5
    assert args == defaults  # the published values are the defaults
    assert args.downsample_kernel == 4 and args.head_dim == 64
    shapes = {k: tuple(v.shape) for k, v in tree_flatten(SpeechEncoder(args).parameters())}
    # keys/shapes from LAYOUT.md (convs in PyTorch layout [out, in, k], as published)
    assert shapes["encoder.layers.0.conv.weight"] == (64, 1, 7)
    assert shapes["encoder.layers.12.conv.weight"] == (1024, 512, 16)
    assert shapes["encoder.layers.14.conv.weight"] == (512, 1024, 3)
    assert shapes["downsample.conv.weight"] == (512, 512, 4)
    assert shapes["encoder_transformer.layers.7.mlp.fc1.weight"] == (2048, 512)
    assert shapes["quantizer.acoustic_residual_vector_quantizer.layers.30.codebook.embed_sum"] == (2048, 256)
    assert shapes["quantizer.semantic_residual_vector_quantizer.input_proj.weight"] == (256, 512, 1)
    n_seanet = 2 + 4 * (4 + 2) + 2  # first conv, 4 x (resblock 2 convs + down conv), last conv; w+b
    n_tf = 8 * 12
    n_rvq = 32 * 3 + 4
    assert len(shapes) == n_seanet + n_tf + 1 + n_rvq == 225  # the encoder.* count of LAYOUT.md


def test_random_real_dims_runs():
    model = build_random_speech_encoder(seed=0)
    wav = (0.3 * np.sin(np.arange(4000) * 0.03)).astype(np.float32)
    codes = model.encode(wav)
    assert codes.shape == (3, 16)
    assert codes.min() >= 0 and codes.max() < 2048


def test_gelu_erf_matches_exact_gelu():
    import math

    from ttscli.codecs.mimi.transformer import gelu_erf

    xs = np.linspace(-9, 9, 1001).astype(np.float32)
    ref = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in xs.astype(np.float64)])
    out = np.array(gelu_erf(mx.array(xs)))
    assert np.abs(out - ref).max() < 1e-6


@pytest.mark.parametrize("in_ch,k,s,d",
                         [(8, 3, 2, 1), (8, 4, 2, 1), (8, 3, 1, 2), (2, 7, 1, 1), (16, 1, 1, 1), (8, 10, 5, 1)])
def test_causal_conv_forms_and_chunking(in_ch, k, s, d):
    from ttscli.codecs.mimi.seanet import CausalConv1d

    rng = np.random.default_rng(k * 10 + s)
    conv = CausalConv1d(in_ch, 5, k, stride=s, dilation=d)
    conv.conv.weight = mx.array(rng.standard_normal((5, in_ch, k)).astype(np.float32))   # [out, in, k]
    conv.conv.bias = mx.array(rng.standard_normal(5).astype(np.float32))
    n = 61
    x = rng.standard_normal((1, n, in_ch)).astype(np.float32)
    # direct definition: left pad (k-1)d+1-s zeros, right pad to a whole number of strides
    left, right = (k - 1) * d + 1 - s, -(-n // s) * s - n
    xp = np.pad(x[0], ((left, right), (0, 0)))
    w = np.array(conv.conv.weight)
    ref = (np.stack([sum(xp[t * s + j * d] @ w[:, :, j].T for j in range(k)) for t in range(-(-n // s))])
           + np.array(conv.conv.bias))
    out = np.array(conv(mx.array(x))[0])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    # chunks of a whole number of strides with carried context give the same result
    cache: dict = {}
    step = 4 * s
    parts = [conv(mx.array(x[:, i: i + step]), cache=cache, final=i + step >= n) for i in range(0, n, step)]
    np.testing.assert_allclose(np.array(mx.concatenate(parts, axis=1)[0]), ref, rtol=1e-5, atol=1e-5)
