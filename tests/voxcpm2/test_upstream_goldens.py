"""VoxCPM2 against the upstream package's own outputs (scripts/goldens/voxcpm2_upstream.py):
prefill hidden states, patches with upstream's recorded diffusion noise, stop decisions and the
AudioVAE's waveform, in every prompt mode."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "voxcpm2"
MODES = ("plain", "clone", "continuation", "clone_continuation")


@pytest.fixture(scope="module")
def golden():
    return np.load(FIX / "goldens.npz")


@pytest.fixture(scope="module")
def model():
    from ttscli.models.voxcpm2.load import load_model

    return load_model(FIX / "tiny")


def _prompt(g, mode):
    from ttscli.models.voxcpm2.generate import Prompt

    return Prompt(mx.array(g[f"{mode}_tokens"]), mx.array(g[f"{mode}_text_mask"]),
                  mx.array(g[f"{mode}_feat"]), mx.array(g[f"{mode}_feat_mask"]))


def _cos(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def onnx_lm_model():
    """The tiny model with both LMs as float32 onnxruntime graphs (``--backend lm=onnx-f32``)."""
    pytest.importorskip("onnxruntime")
    from ttscli.models.voxcpm2.load import load_model
    from ttscli.models.voxcpm2.onnx_lm import attach

    m = load_model(FIX / "tiny")
    assert attach(m, "onnx-f32", FIX / "tiny", "tiny") == "onnx-float32"
    assert m.converted_stacks is not None and not m.base_lm.layers      # the MLX layers are freed
    return m


@pytest.mark.parametrize("backend", ["mlx", "onnx-lm"])
@pytest.mark.parametrize("mode", MODES)
def test_prefill_hidden_matches_upstream(model, golden, mode, backend, request):
    from ttscli.models.voxcpm2.generate import prefill

    if backend == "onnx-lm":
        model = request.getfixturevalue("onnx_lm_model")
    pre = prefill(model, _prompt(golden, mode))
    assert _cos(pre.base_hidden, golden[f"{mode}_base_hidden"]) >= 0.99999
    assert _cos(pre.residual_all, golden[f"{mode}_residual_hidden"]) >= 0.99999


@pytest.fixture(scope="module")
def onnx_model():
    """The tiny model with its LocDiT on onnxruntime (the default flow_estimator on a Linux CPU)."""
    pytest.importorskip("onnxruntime")
    from ttscli.models.voxcpm2.load import load_model
    from ttscli.models.voxcpm2.onnx_local import OnnxLocDiT, attach

    m = load_model(FIX / "tiny")
    attach(m, FIX / "tiny", "tiny")
    assert isinstance(m.feat_decoder.external_estimator, OnnxLocDiT)
    return m


@pytest.mark.parametrize("backend", ["mlx", "onnx", "onnx-lm"])
@pytest.mark.parametrize("mode", MODES)
def test_patches_and_stops_with_recorded_noise_match_upstream(model, golden, mode, backend, request):
    from ttscli.models.voxcpm2.generate import patches

    if backend != "mlx":
        model = request.getfixturevalue({"onnx": "onnx_model", "onnx-lm": "onnx_lm_model"}[backend])
    noise = golden[f"{mode}_noise"]          # upstream's draws, [n, 1, D, P]
    out = list(patches(model, _prompt(golden, mode), lambda i: mx.array(noise[i].transpose(0, 2, 1)),
                       steps=10, cfg_value=2.0, max_len=12))
    ours = np.concatenate([np.array(p) for p, _ in out])
    want = golden[f"{mode}_patches"]
    assert ours.shape == want.shape            # same number of patches: the stop decisions agree
    np.testing.assert_allclose(ours, want, atol=1e-4 * np.abs(want).max())
    stops = np.concatenate([np.array(s) for _, s in out]).argmax(-1)
    np.testing.assert_array_equal(stops, golden[f"{mode}_stop_logits"].argmax(-1))


def test_audiovae_decode_stream_and_encode_match_upstream(model, golden):
    from ttscli.codecs.audiovae import DecodeStream

    lat = golden["plain_latent"].transpose(0, 2, 1)           # [1, T, D]
    want = golden["plain_audio"][:, 0]
    audio = np.array(model.audio_vae.decode(mx.array(lat)))
    assert np.abs(audio - want).max() <= 1e-4 * np.abs(want).max()
    stream = DecodeStream(model.audio_vae)
    parts = [np.array(stream.push(mx.array(lat[:, i:i + 4]))) for i in range(0, lat.shape[1], 4)]
    np.testing.assert_array_equal([p.shape[-1] for p in parts], golden["stream_chunk_lengths"])
    assert np.abs(np.concatenate(parts, -1) - golden["stream_audio"][:, 0]).max() <= 1e-4 * np.abs(want).max()
    feats = np.array(model.audio_vae.encode(mx.array(golden["ref_wav"][None])))[0]
    ref = golden["ref_feat"]
    assert np.abs(feats - ref.reshape(-1, ref.shape[-1])).max() <= 1e-4 * np.abs(ref).max()


def test_locdit_int8_graph_is_near_the_float32_one(model):
    """``--backend flow_estimator=onnx-int8`` (opt-in): one LocDiT call within 5% of the MLX
    LocDiT's peak on the tiny checkpoint (float32: the patch tests above)."""
    pytest.importorskip("onnxruntime")
    from ttscli.models.voxcpm2.load import load_model
    from ttscli.models.voxcpm2.onnx_local import attach

    m = load_model(FIX / "tiny")
    a = m.args
    rng = np.random.default_rng(0)
    x, cond = (mx.array(rng.standard_normal((2, a.patch_size, a.feat_dim)).astype(np.float32)) for _ in range(2))
    mu = mx.array(rng.standard_normal((2, 2 * a.dit.hidden_dim)).astype(np.float32))
    t, dt = mx.array([0.7, 0.7]), mx.zeros((2,))
    ref = np.array(m.feat_decoder.estimator(x, mu, t, cond, dt))
    attach(m, FIX / "tiny", "tiny", "int8")
    got = np.array(m.feat_decoder.external_estimator(x, mu, t, cond, dt))
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert 1e-4 < err <= 0.05, err


def test_patch_encoder_on_onnxruntime_matches_upstream(golden):
    """LocEnc's graph (``--backend patch_encoder=onnx``, the Linux CPU default): the reference's
    and the continuation's patches encoded as upstream's prefill took them (its hidden states
    equal within the prefill's cosine), and the MLX encoder's output within 1e-5 of its peak."""
    pytest.importorskip("onnxruntime")
    from ttscli.models.voxcpm2.generate import prefill
    from ttscli.models.voxcpm2.load import load_model
    from ttscli.models.voxcpm2.onnx_local import OnnxLocEnc, attach_encoder

    m = load_model(FIX / "tiny")
    feats = mx.array(golden["clone_continuation_feat"])
    ref = np.array(m.embed_patches(feats))
    attach_encoder(m, FIX / "tiny", "tiny")
    assert isinstance(m.feat_encoder.external, OnnxLocEnc)
    got = np.array(m.embed_patches(feats))
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
    for mode in MODES:
        pre = prefill(m, _prompt(golden, mode))
        assert _cos(pre.base_hidden, golden[f"{mode}_base_hidden"]) >= 0.99999
