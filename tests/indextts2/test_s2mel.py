"""IndexTTS2's S2Mel against upstream's goldens (scripts/goldens/indextts2_upstream.py): the length
regulator, the CFM's mel from recorded noise, gpt_layer, and strict loading of s2mel.pth."""
import ttscli  # noqa: F401  (a real BLAS before mlx is imported)

import dataclasses
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import yaml
from mlx.utils import tree_flatten

from ttscli import torchfile
from ttscli.errors import CheckpointError
from ttscli.models.indextts2 import s2mel as s2m

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
TINY = FIX / "tiny"


@pytest.fixture(scope="module")
def goldens():
    return np.load(FIX / "goldens.npz")


@pytest.fixture(scope="module")
def args():
    cfg = yaml.safe_load((TINY / "config.yaml").read_text())
    return s2m.S2MelArgs.from_dict(cfg["s2mel"], source="config.yaml", where="s2mel.")


@pytest.fixture(scope="module")
def weights():
    return s2m.read_s2mel(TINY / "s2mel.pth")


@pytest.fixture(scope="module")
def model(args):
    return s2m.load_s2mel(TINY / "s2mel.pth", args)


def rel_err(ours, ref) -> float:
    return float(np.abs(np.asarray(ours) - ref).max() / np.abs(ref).max())


def test_args_from_yaml(args):
    assert (args.DiT.hidden_dim, args.DiT.num_heads, args.DiT.depth) == (32, 2, 3)
    assert args.DiT.uvit_skip_connection and args.DiT.long_skip_connection and not args.DiT.is_causal
    assert (args.wavenet.num_layers, args.wavenet.kernel_size) == (2, 5)
    assert (args.length_regulator.channels, args.length_regulator.in_channels) == (32, 32)
    assert args.preprocess_params.sr == 22050 and args.preprocess_params.spect_params.hop_length == 256
    full = s2m.S2MelArgs()
    assert (full.DiT.hidden_dim, full.DiT.depth, full.wavenet.num_layers) == (512, 13, 8)
    assert full.gpt_layer == [1280, 256, 128, 1024]
    with pytest.raises(CheckpointError, match="depth"):
        s2m.S2MelArgs.from_dict({"DiT": {"depth": "13"}}, source="config.yaml", where="s2mel.")


def test_published_names_and_shapes():
    """The parameter tree at the published size has s2mel.pth's names and shapes (the spec's table)."""
    shapes = {k: tuple(v.shape) for k, v in tree_flatten(s2m.S2Mel(s2m.S2MelArgs(
        DiT=s2m.DiTArgs(uvit_skip_connection=True))).parameters())}
    est = "cfm.estimator."
    for name, shape in {
        est + "transformer.layers.12.attention.wqkv.weight": (1536, 512),
        est + "transformer.layers.12.feed_forward.w2.weight": (512, 1536),
        est + "transformer.layers.0.attention_norm.project_layer.weight": (1024, 512),
        est + "transformer.layers.3.skip_in_linear.weight": (512, 1024),
        est + "transformer.norm.norm.weight": (512,),
        est + "x_embedder.weight": (512, 80),
        est + "cond_embedder.weight": (1024, 512),
        est + "cond_x_merge_linear.weight": (512, 864),
        est + "skip_linear.weight": (512, 592),
        est + "t_embedder.freqs": (128,),
        est + "t_embedder2.mlp.0.weight": (512, 256),
        est + "wavenet.in_layers.7.conv.conv.weight": (1024, 512, 5),
        est + "wavenet.res_skip_layers.7.conv.conv.weight": (512, 512, 1),
        est + "wavenet.cond_layer.conv.conv.weight": (8192, 512, 1),
        est + "final_layer.adaLN_modulation.1.weight": (1024, 512),
        est + "conv2.weight": (80, 512, 1),
        est + "input_pos": (16384,),
        "length_regulator.content_in_proj.weight": (512, 1024),
        "length_regulator.model.9.weight": (512, 512, 3),
        "length_regulator.model.10.weight": (512,),
        "length_regulator.model.12.weight": (512, 512, 1),
        "length_regulator.embedding.weight": (2048, 512),
        "gpt_layer.0.weight": (256, 1280),
        "gpt_layer.2.weight": (1024, 128),
    }.items():
        assert shapes.get(name) == shape, name
    # upstream's 103,668,688 parameters count weight_g and weight_v apart (25,088 gains) and no
    # buffers; here weights are folded and the buffers input_pos and both freqs are held
    assert sum(int(np.prod(s)) for s in shapes.values()) == 103_668_688 - 25_088 + 16384 + 2 * 128


def test_length_regulator_prompt(model, goldens):
    out = model.length_regulator(mx.array(goldens["codec_quantized"])[None], goldens["ref_mel"].shape[1])
    assert out.shape == (1, 68, 32)
    assert rel_err(out[0], goldens["prompt_cond"]) <= 1e-5


def test_length_regulator_codes(model, goldens):
    n = s2m.code_frames(len(goldens["greedy"]))
    assert n == int(20 * 1.72) == goldens["cond"].shape[0]
    out = model.length_regulator(mx.array(goldens["codec_vq2emb"])[None], n)
    assert rel_err(out[0], goldens["cond"]) <= 1e-5


def test_code_frames_as_torch_float32():
    n = np.arange(1, 5000)
    torch_like = (n.astype(np.float32) * np.float32(1.72)).astype(np.int64)
    assert [s2m.code_frames(int(k)) for k in n] == torch_like.tolist()


def test_cfm_inference(model, goldens):
    mu = mx.array(np.concatenate([goldens["prompt_cond"], goldens["cond"]]))[None]
    ref_mel = mx.array(goldens["ref_mel"].T)[None]
    mel = model.cfm.inference(mu, ref_mel, mx.array(goldens["style"])[None],
                              mx.array(goldens["cfm_noise"].T)[None], 25, 0.7)
    mel = np.asarray(mel[0])
    P = ref_mel.shape[1]
    assert mel.shape == (mu.shape[1], 80)
    assert not mel[:P].any()                       # upstream zeroes the prompt frames
    assert rel_err(mel[P:], goldens["s2mel_mel"].T) <= 1e-4


def test_velocity_of_target_frames_only(model):
    """Asking for the velocity from a frame on gives exactly those frames of the full pass."""
    est = model.cfm.estimator
    T, start = 50, 30
    assert start - est.wavenet.reach > 0            # the cut path is taken
    key = mx.random.key(3)
    k1, k2, k3 = mx.random.split(key, 3)
    x = mx.random.normal((2, T, 80), key=k1)
    cond = est.condition(mx.random.normal((2, T, 80), key=k2), mx.random.normal((2, T, 32), key=k3),
                         mx.ones((2, 192)))
    t = mx.array([0.4])
    full = np.asarray(est.velocity(x, t, cond))
    part = np.asarray(est.velocity(x, t, cond, start=start))
    assert part.shape == (2, T - start, 80)
    assert np.abs(part - full[:, start:]).max() <= 1e-5 * np.abs(full).max()


@pytest.mark.parametrize("chunk_rows", [None, 7])
def test_host_attention(monkeypatch, chunk_rows):
    """The numpy-softmax attention equals MLX's, chunked by heads or (small chunks) by query blocks."""
    from ttscli.models.indextts2 import dit
    from ttscli.nn.layers import attention

    L = 40
    if chunk_rows:
        monkeypatch.setattr(dit, "HOST_CHUNK_BYTES", 4 * L * chunk_rows)
    kq, kk, kv = mx.random.split(mx.random.key(1), 3)
    q, k, v = (mx.random.normal((2, 3, L, 16), key=key) * 2 for key in (kq, kk, kv))
    ref = np.asarray(attention(q, k, v, 0.25))
    assert np.abs(np.asarray(dit.host_attention(q, k, v, 0.25)) - ref).max() <= 1e-5 * np.abs(ref).max()


def test_gpt_layer(model, weights, goldens):
    assert model.args.gpt_layer == [32, 16, 8, 32]    # read from the tensors, not the defaults
    latent = goldens["gpt_latent"]
    ref = latent
    for i in range(3):
        ref = ref @ weights[f"gpt_layer.{i}.weight"].T + weights[f"gpt_layer.{i}.bias"]
    out = model.project_latent(mx.array(latent)[None])[0]
    assert rel_err(out, ref) <= 1e-5


def test_strict_loading(args, weights):
    s2m.s2mel_from_weights(dict(weights), args)      # as read: loads
    extra = dict(weights)
    extra["cfm.estimator.style_in.weight"] = np.zeros((32, 192), np.float32)
    with pytest.raises(CheckpointError, match=r"unexpected 1: net\.cfm\.estimator\.style_in\.weight"):
        s2m.s2mel_from_weights(extra, args)
    missing = {k: v for k, v in weights.items() if k != "length_regulator.model.4.bias"}
    with pytest.raises(CheckpointError, match=r"missing 1: net\.length_regulator\.model\.4\.bias"):
        s2m.s2mel_from_weights(missing, args)
    shaped = dict(weights)
    shaped["cfm.estimator.conv2.weight"] = np.zeros((80, 16, 1), np.float32)
    with pytest.raises(CheckpointError, match=r"mis-shaped 1: net\.cfm\.estimator\.conv2\.weight"):
        s2m.s2mel_from_weights(shaped, args)
    unfolded = {k: v for k, v in weights.items() if not k.endswith("x_embedder.weight_g")}
    with pytest.raises(CheckpointError, match=r"x_embedder\.weight_v"):
        s2m.s2mel_from_weights(unfolded, args)
    pos = dict(weights)
    pos["cfm.estimator.input_pos"] = weights["cfm.estimator.input_pos"][::-1].copy()
    with pytest.raises(CheckpointError, match="input_pos"):
        s2m.s2mel_from_weights(pos, args)


def test_file_layout_checked(monkeypatch):
    good = torchfile.load(TINY / "s2mel.pth")
    for bad, msg in (({"model": {}}, "'net'"),
                     ({"net": {k: v for k, v in good["net"].items() if k != "gpt_layer"}}, "no gpt_layer"),
                     ({"net": {**good["net"], "emo_layer": {}}}, "unexpected entries under net: emo_layer")):
        monkeypatch.setattr(torchfile, "load", lambda path, bad=bad: bad)
        with pytest.raises(CheckpointError, match=msg):
            s2m.read_s2mel("s2mel.pth")
    prefixed = {"net": {**good["net"], "gpt_layer": {"module." + k: v for k, v in good["net"]["gpt_layer"].items()}}}
    monkeypatch.setattr(torchfile, "load", lambda path: prefixed)
    assert "gpt_layer.0.weight" in s2m.read_s2mel("s2mel.pth")   # DDP's prefix stripped, as upstream does


def test_unsupported_settings_refused(args):
    bad = dataclasses.replace(args, DiT=dataclasses.replace(args.DiT, time_as_token=True))
    with pytest.raises(CheckpointError, match="time_as_token"):
        s2m.S2Mel(bad)


def test_random_weights_finite(args):
    model = s2m.random_s2mel(args)
    T, P = 40, 15
    mel = model.cfm.inference(mx.ones((1, T, 32)), mx.zeros((1, P, 80)) - 5.0, mx.ones((1, 192)),
                              mx.random.normal((1, T, 80), key=mx.random.key(0)), steps=4)
    mel = np.asarray(mel)
    assert mel.shape == (1, T, 80) and np.isfinite(mel).all() and mel[:, P:].std() > 0
