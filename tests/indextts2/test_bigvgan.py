"""BigVGAN v2 (ttscli.codecs.bigvgan) against upstream index-tts goldens.

Fixtures from scripts/goldens/indextts2_upstream.py: ``tiny/bigvgan`` is upstream's BigVGAN at a
tiny width (4 x4 stages, 32 -> 2 channels, AMPBlock1, SnakeBeta in log scale) saved as the
published folder is (``{"generator": state_dict}`` with weight norm), and ``wav`` is its output
for the golden ``s2mel_mel``.
"""
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.codecs.bigvgan import V2_22KHZ_80BAND_256X, BigVGANArgs, load_bigvgan, random_bigvgan
from ttscli.codecs.bigvgan import model as bigvgan_model
from ttscli.errors import CheckpointError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
TINY = FIX / "tiny" / "bigvgan"

# nvidia/bigvgan_v2_22khz_80band_256x's config.json (the fields the generator reads), as the spec
# (docs/models/indextts2.md, BigVGAN) describes it
PUBLISHED = {
    "resblock": "1", "upsample_rates": [4, 4, 2, 2, 2, 2], "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
    "upsample_initial_channel": 1536, "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "activation": "snakebeta",
    "snake_logscale": True, "use_tanh_at_final": False, "use_bias_at_final": False, "num_mels": 80,
    "sampling_rate": 22050, "hop_size": 256, "n_fft": 1024, "win_size": 1024, "fmin": 0, "fmax": None,
    "segment_size": 65536, "lambda_melloss": 15,     # training keys: ignored
}


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(FIX / "goldens.npz"))


@pytest.fixture(scope="module")
def tiny():
    return load_bigvgan(TINY)


def test_waveform_matches_upstream(tiny, golden):
    mel = mx.array(golden["s2mel_mel"].T[None])              # upstream [80, T] -> [1, T, 80]
    wav = np.array(tiny(mel))
    want = golden["wav"]
    assert wav.shape == (1, want.shape[0]) == (1, golden["s2mel_mel"].shape[1] * 256)
    assert wav.dtype == np.float32
    peak = np.abs(want).max()
    assert peak > 0.05                                          # a waveform, not silence
    assert np.abs(wav[0] - want).max() <= 1e-4 * peak


def test_batch_rows_are_independent(tiny, golden):
    mel = golden["s2mel_mel"].T
    other = mel[::-1] + 0.3
    both = np.array(tiny(mx.array(np.stack([mel, other]))))
    alone = np.array(tiny(mx.array(mel[None])))[0]
    assert np.abs(both[0] - alone).max() <= 1e-6
    assert np.abs(both[1] - alone).max() > 1e-3


# ----------------------------------------------------------------------------- the anti-aliased activation

def _reference_activation(x: np.ndarray, f_up: np.ndarray, f_down: np.ndarray, a: np.ndarray,
                          inv_b: np.ndarray) -> np.ndarray:
    """Upstream's torch Activation1d written out plainly in float64, ``x [B, T, C]``: replicate
    pad 5, transposed conv stride 2 (gain 2), crop 15 each side; Snake; replicate pad (5, 6),
    conv stride 2."""
    k = len(f_up)
    pad = k // 2 - 1
    crop = pad * 2 + (k - 2) // 2
    xp = np.pad(x, ((0, 0), (pad, pad), (0, 0)), mode="edge")
    full = np.zeros((x.shape[0], (xp.shape[1] - 1) * 2 + k, x.shape[2]))
    for i in range(xp.shape[1]):
        full[:, 2 * i: 2 * i + k] += xp[:, i: i + 1] * f_up[None, :, None]
    up = 2 * full[:, crop: full.shape[1] - crop]
    z = up + inv_b * np.sin(up * a) ** 2
    zp = np.pad(z, ((0, 0), (k // 2 - 1, k // 2), (0, 0)), mode="edge")
    t_out = (zp.shape[1] - k) // 2 + 1
    return sum(zp[:, j: j + 2 * t_out: 2] * f_down[j] for j in range(k))


@pytest.mark.parametrize("activation,logscale", [("snakebeta", True), ("snake", False)])
@pytest.mark.parametrize("frames", [1, 2, 7, 11, 12, 40])
def test_activation_matches_upstream_formula(activation, logscale, frames):
    rng = np.random.default_rng(frames)
    args = BigVGANArgs(activation=activation, snake_logscale=logscale)
    act = bigvgan_model.Activation1d(bigvgan_model._snake(args, 5))
    f = bigvgan_model.kaiser_sinc_filter(0.25, 0.3, 12)
    f_down = f * (1 + 0.1 * rng.standard_normal(12)).astype(np.float32)   # distinct filters: no mix-up
    act.downsample.lowpass.filter = mx.array(f_down.reshape(1, 1, 12))
    act.act.alpha = mx.array((0.3 * rng.standard_normal(5) + (0 if logscale else 1.5)).astype(np.float32))
    if activation == "snakebeta":
        act.act.beta = mx.array((0.3 * rng.standard_normal(5)).astype(np.float32))
    x = (2 * rng.standard_normal((2, frames, 5))).astype(np.float32)
    got = np.array(act(mx.array(x)))
    a, inv_b = (np.array(v, dtype=np.float64) for v in act.act.factors())
    want = _reference_activation(x.astype(np.float64), f.astype(np.float64), f_down.astype(np.float64), a, inv_b)
    assert got.shape == x.shape
    assert np.abs(got - want).max() <= 2e-6 * np.abs(want).max()
    # the following conv's zero padding, written by the activation
    padded = np.array(act(mx.array(x), pad=(2, 3)))
    assert padded.shape == (2, frames + 5, 5)
    assert not padded[:, :2].any() and not padded[:, -3:].any()
    assert np.array_equal(padded[:, 2: 2 + frames], got)


def test_filter_is_upstreams(tiny):
    # the checkpoint's buffers are upstream's kaiser_sinc_filter1d(0.25, 0.3, 12)
    ours = bigvgan_model.kaiser_sinc_filter(0.25, 0.3, 12)
    theirs = np.array(tiny.resblocks[0].activations[0].upsample.filter).reshape(-1)
    assert np.abs(ours - theirs).max() <= 1e-7
    assert abs(float(ours.sum()) - 1.0) <= 1e-6


# ----------------------------------------------------------------------------- the published size

def _published_parameters(a: dict) -> int:
    """Tensor sizes of the spec's table: conv_pre [1536, 80, 7] + bias; ups.i.0 [c, c/2, k] + bias;
    per stage and kernel k, 3 + 3 convs [ch, ch, k] + bias and 6 activations (alpha, beta [ch],
    two 12-tap filters); activation_post; conv_post [1, 24, 7] without bias."""
    c0, taps = a["upsample_initial_channel"], 12
    n = c0 * a["num_mels"] * 7 + c0
    for i, k in enumerate(a["upsample_kernel_sizes"]):
        cin = c0 // 2 ** i
        n += cin * (cin // 2) * k + cin // 2
        ch = cin // 2
        for k_res, dil in zip(a["resblock_kernel_sizes"], a["resblock_dilation_sizes"]):
            n += 2 * len(dil) * (ch * ch * k_res + ch + 2 * ch + 2 * taps)
    ch = c0 // 2 ** len(a["upsample_rates"])
    return n + 2 * ch + 2 * taps + ch * 7


@pytest.fixture(scope="module")
def published():
    return random_bigvgan(BigVGANArgs.from_dict(PUBLISHED))


def test_published_size_builds(published):
    from mlx.utils import tree_flatten

    params = dict(tree_flatten(published.parameters()))
    count = sum(v.size for v in params.values())
    # upstream's module after remove_weight_norm holds 112,199,472 parameters and 109 x 2
    # twelve-tap filter buffers (2,616)
    assert count == _published_parameters(PUBLISHED) == 112_199_472 + 2_616
    assert params["conv_pre.weight"].shape == (1536, 80, 7)
    assert params["ups.5.0.weight"].shape == (48, 24, 4)
    assert params["resblocks.17.convs2.2.weight"].shape == (24, 24, 11)
    assert params["resblocks.17.activations.5.downsample.lowpass.filter"].shape == (1, 1, 12)
    assert params["conv_post.weight"].shape == (1, 24, 7) and "conv_post.bias" not in params
    assert len(published.resblocks) == 18
    # the filters are the fixed Kaiser-sinc taps, not random
    f = np.array(params["resblocks.3.activations.2.upsample.filter"]).reshape(-1)
    assert np.abs(f - bigvgan_model.kaiser_sinc_filter(0.25, 0.3, 12)).max() == 0


def test_published_constant_is_the_spec():
    assert BigVGANArgs.from_dict(V2_22KHZ_80BAND_256X) == BigVGANArgs.from_dict(PUBLISHED)


def test_published_size_maps_frames_to_samples(published):
    mel = mx.array(np.random.default_rng(0).standard_normal((1, 4, 80)).astype(np.float32) - 5)
    wav = np.array(published(mel))
    assert wav.shape == (1, 4 * 256) and wav.dtype == np.float32
    assert np.isfinite(wav).all() and np.abs(wav).max() <= 1.0 and np.abs(wav).std() > 0


def test_other_variants_run():
    # AMPBlock2, plain Snake in linear scale, final bias and tanh
    args = BigVGANArgs.from_dict({**PUBLISHED, "resblock": "2", "activation": "snake", "snake_logscale": False,
                                  "use_tanh_at_final": True, "use_bias_at_final": True,
                                  "upsample_initial_channel": 16, "upsample_rates": [4, 2],
                                  "upsample_kernel_sizes": [8, 4]})
    model = random_bigvgan(args)
    assert model.resblocks[0].convs[2].dilation == 5 and "bias" in model.conv_post
    wav = np.array(model(mx.array(np.zeros((2, 3, 80), np.float32))))
    assert wav.shape == (2, 24) and np.abs(wav).max() < 1.0


# ----------------------------------------------------------------------------- checkpoint errors

def test_missing_tensor_is_named(monkeypatch):
    real = bigvgan_model.torchfile.state_dict

    def without(path, key=None):
        sd = real(path, key=key)
        del sd["resblocks.4.convs2.1.weight_v"], sd["resblocks.4.convs2.1.weight_g"]
        return sd

    monkeypatch.setattr(bigvgan_model.torchfile, "state_dict", without)
    with pytest.raises(CheckpointError, match=r"missing 1: resblocks\.4\.convs2\.1\.weight") as err:
        load_bigvgan(TINY)
    assert "bigvgan_generator.pt" in str(err.value)


def test_unexpected_and_misshaped_tensors_are_named(monkeypatch):
    real = bigvgan_model.torchfile.state_dict

    def altered(path, key=None):
        sd = real(path, key=key)
        sd["extra.weight"] = np.zeros(3, np.float32)
        sd["conv_pre.bias"] = np.zeros(31, np.float32)
        return sd

    monkeypatch.setattr(bigvgan_model.torchfile, "state_dict", altered)
    with pytest.raises(CheckpointError, match=r"unexpected 1: extra\.weight.*mis-shaped 1: conv_pre\.bias"):
        load_bigvgan(TINY)


def test_config_is_read_and_checked(tmp_path):
    args = BigVGANArgs.from_file(TINY / "config.json")
    assert args.upsample_rates == [4, 4, 4, 4] and args.upsample_factor == 256 and args.use_tanh_at_final is False
    (tmp_path / "config.json").write_text('{"activation": "relu"}')
    with pytest.raises(CheckpointError, match="activation"):
        BigVGANArgs.from_file(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="config.json is missing"):
        load_bigvgan(tmp_path / "nowhere")
