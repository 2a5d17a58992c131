"""MaskGCT's semantic codec (RepCodec) against upstream index-tts goldens.

Fixtures from scripts/goldens/indextts2_upstream.py: ``tiny/semantic_codec/model.safetensors`` (upstream's
``RepCodec`` from the tiny yaml's ``semantic_codec`` section, saved as MaskGCT's file is) and, in
``goldens.npz``, upstream ``quantize(spk_feat)`` (``codec_ids``, ``codec_quantized``) and
``quantizer.vq2emb(greedy) + gpt_layer(gpt_latent)`` (``codec_vq2emb``, with ``gpt_layer``'s
tensors in ``tiny/s2mel.pth``).

Upstream's quantised output is ``out_project(z_e + (z_q - z_e))``, which is ``vq2emb(ids)`` up to
one float rounding (1.2e-7 apart in upstream itself on these fixtures), so ``codec_quantized`` is
also the golden of ``vq2emb(codec_ids)``.
"""
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import yaml

from ttscli import torchfile
from ttscli.checkpoint import read_safetensors
from ttscli.codecs.maskgct_semantic import (RepCodec, SemanticCodecArgs, gelu_erf, load_semantic_codec,
                                            random_semantic_codec)
from ttscli.errors import CheckpointError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
TINY = FIX / "tiny"
CODEC = TINY / "semantic_codec" / "model.safetensors"


@pytest.fixture(scope="module")
def args():
    cfg = yaml.safe_load((TINY / "config.yaml").read_text())
    return SemanticCodecArgs.from_dict(cfg["semantic_codec"], source="config.yaml", where="semantic_codec.")


@pytest.fixture(scope="module")
def codec(args):
    return load_semantic_codec(CODEC, args)


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(FIX / "goldens.npz"))


def _err(got, want) -> float:
    """Max abs error relative to the golden's scale (its max abs value)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_args_from_yaml(args):
    assert (args.codebook_size, args.hidden_size, args.codebook_dim) == (64, 32, 8)
    assert (args.vocos_dim, args.vocos_intermediate_dim, args.vocos_num_layers) == (16, 32, 1)
    assert (args.num_quantizers, args.downsample_scale) == (1, 1)
    # the published yaml's section builds the published codec; upstream reads the intermediate
    # width and the depth only beside vocos_dim
    real = SemanticCodecArgs.from_dict({"codebook_size": 8192, "hidden_size": 1024, "codebook_dim": 8,
                                        "vocos_dim": 384, "vocos_intermediate_dim": 2048, "vocos_num_layers": 12})
    assert real == SemanticCodecArgs()
    assert SemanticCodecArgs.from_dict({"vocos_num_layers": 3}).vocos_num_layers == 12
    with pytest.raises(CheckpointError, match="semantic_codec.codebook_dim"):
        SemanticCodecArgs.from_dict({"codebook_dim": "8"}, where="semantic_codec.")


def test_quantize_matches_upstream(codec, golden):
    ids, quantized = codec.quantize(mx.array(golden["spk_feat"])[None])
    assert ids.dtype == mx.int32 and ids.shape == (1, 40)
    np.testing.assert_array_equal(np.array(ids[0]), golden["codec_ids"])
    assert _err(quantized[0], golden["codec_quantized"]) <= 1e-5


def test_vq2emb_of_quantize_ids(codec, golden):
    emb = codec.vq2emb(mx.array(golden["codec_ids"].astype(np.int32))[None])
    assert _err(emb[0], golden["codec_quantized"]) <= 1e-5


def test_vq2emb_of_generated_codes(codec, golden):
    # upstream's S2Mel condition is vq2emb(codes) + gpt_layer(latent); gpt_layer is three linears
    layer = torchfile.load(TINY / "s2mel.pth")["net"]["gpt_layer"]
    h = golden["gpt_latent"].astype(np.float64)
    for i in range(3):
        h = h @ layer[f"{i}.weight"].T.astype(np.float64) + layer[f"{i}.bias"]
    emb = codec.vq2emb(mx.array(golden["greedy"].astype(np.int32))[None])
    assert _err(np.array(emb[0]) + h, golden["codec_vq2emb"]) <= 1e-5


def test_batch_rows_are_independent(codec, golden):
    feat = golden["spk_feat"]
    other = feat[::-1] * 0.7
    ids, q = codec.quantize(mx.array(np.stack([feat, other])))
    ids1, q1 = codec.quantize(mx.array(other)[None])
    np.testing.assert_array_equal(np.array(ids[0]), golden["codec_ids"])
    np.testing.assert_array_equal(np.array(ids[1]), np.array(ids1[0]))
    assert np.abs(np.array(q[1]) - np.array(q1[0])).max() <= 1e-6


def test_gelu_is_exact_gelu():
    # the exact (erf) GELU upstream's nn.GELU() computes; the tanh approximation is 5e-4 away
    x = np.linspace(-14, 14, 40001, dtype=np.float32)
    from math import erf, sqrt
    want = np.array([0.5 * v * (1 + erf(v / sqrt(2))) for v in x.astype(np.float64)])
    assert np.abs(np.array(gelu_erf(mx.array(x))) - want).max() <= 1.5e-6


def _write(tmp_path, weights) -> Path:
    path = tmp_path / "model.safetensors"
    mx.save_safetensors(str(path), weights)
    return path


def test_unexpected_tensor_is_refused(args, tmp_path):
    w = read_safetensors(CODEC)
    w["encoder.0.convnext.0.extra"] = mx.zeros((3,))
    with pytest.raises(CheckpointError, match=r"unexpected 1: encoder\.0\.convnext\.0\.extra"):
        load_semantic_codec(_write(tmp_path, w), args)


def test_missing_and_misshaped_tensors_are_named(args, tmp_path):
    w = read_safetensors(CODEC)
    del w["quantizer.quantizers.0.in_project.weight_g"]
    with pytest.raises(CheckpointError, match=r"missing 1: quantizer\.quantizers\.0\.in_project\.weight_g"):
        load_semantic_codec(_write(tmp_path, w), args)
    w = read_safetensors(CODEC)
    w["quantizer.quantizers.0.codebook.weight"] = mx.zeros((65, 8))
    with pytest.raises(CheckpointError, match=r"mis-shaped 1: quantizer\.quantizers\.0\.codebook\.weight"):
        load_semantic_codec(_write(tmp_path, w), args)


def test_random_codec_at_the_real_size():
    args = SemanticCodecArgs()
    codec = random_semantic_codec(args)
    assert isinstance(codec, RepCodec)
    ids, q = codec.quantize(mx.random.normal((1, 12, 1024), key=mx.random.key(3)))
    assert ids.shape == (1, 12) and q.shape == (1, 12, 1024)
    ids = np.array(ids)
    assert ids.min() >= 0 and ids.max() < args.codebook_size
    assert np.isfinite(np.array(q)).all()
    assert np.abs(np.array(codec.vq2emb(mx.array(ids))) - np.array(q)).max() == 0.0
