"""IndexTTS2's S2Mel velocity network on onnxruntime (onnx_s2mel.py) against the MLX DiT and
upstream's goldens (scripts/goldens/indextts2_upstream.py): float32 equal to the MLX velocity,
the whole CFM's mel equal to upstream's, int8 near float32, a cached graph found again."""
import ttscli  # noqa: F401  (a real BLAS before mlx is imported)

import dataclasses
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import yaml

from ttscli.errors import UsageError
from ttscli.models.indextts2 import onnx_s2mel
from ttscli.models.indextts2 import s2mel as s2m

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
TINY = FIX / "tiny"
T = 50


@pytest.fixture(scope="module", autouse=True)
def graph_cache(tmp_path_factory):
    """Graphs are built into a cache of this module's, not the user's."""
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("indextts2-s2mel-cache")
    mp.setenv("TTSCLI_CACHE", str(cache))
    yield cache
    mp.undo()


@pytest.fixture(scope="module")
def goldens():
    return np.load(FIX / "goldens.npz")


@pytest.fixture(scope="module")
def args():
    cfg = yaml.safe_load((TINY / "config.yaml").read_text())
    return s2m.S2MelArgs.from_dict(cfg["s2mel"], source="config.yaml", where="s2mel.")


def load(args):
    return s2m.load_s2mel(TINY / "s2mel.pth", args)


def inputs(est, batch: int, content_dim: int = 32, seed: int = 3):
    k1, k2, k3, k4 = mx.random.split(mx.random.key(seed), 4)
    x = mx.random.normal((batch, T, 80), key=k1)
    cond = est.condition(mx.random.normal((batch, T, 80), key=k2), mx.random.normal((batch, T, content_dim), key=k3),
                         mx.random.normal((batch, 192), key=k4))
    return x, cond


def rel_err(ours, ref) -> float:
    return float(np.abs(np.asarray(ours) - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def float32_model(args):
    model = load(args)
    assert onnx_s2mel.attach(model, TINY, "tiny") == "onnx-float32"
    assert isinstance(model.cfm.external_velocity, onnx_s2mel.OnnxVelocity)
    return model


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("start", [0, 3, 30, 49])
def test_velocity_equals_mlx(float32_model, batch, start):
    """Every start: 0, inside the WaveNet's reach (no cut, an offset) and past it (cut > 0)."""
    est = float32_model.cfm.estimator
    if start == 30:
        assert start - est.wavenet.reach > 0
    x, cond = inputs(est, batch)
    t = mx.array([0.37])
    ref = np.asarray(est.velocity(x, t, cond, start=start))
    got = np.asarray(float32_model.cfm.external_velocity(x, t, cond, start))
    assert got.shape == ref.shape == (batch, T - start, 80)
    assert rel_err(got, ref) <= 1e-5


def test_cfm_inference_on_the_graph(float32_model, goldens, monkeypatch):
    """The whole Euler solve with the graph attached gives upstream's mel (the MLX test's bound),
    and the MLX velocity is never called."""
    est = float32_model.cfm.estimator

    def refuse(*a, **k):
        raise AssertionError("the MLX velocity ran with the graph attached")

    monkeypatch.setattr(est, "velocity", refuse)
    mu = mx.array(np.concatenate([goldens["prompt_cond"], goldens["cond"]]))[None]
    ref_mel = mx.array(goldens["ref_mel"].T)[None]
    mel = float32_model.cfm.inference(mu, ref_mel, mx.array(goldens["style"])[None],
                                      mx.array(goldens["cfm_noise"].T)[None], 25, 0.7)
    mel = np.asarray(mel[0])
    P = ref_mel.shape[1]
    assert not mel[:P].any()
    assert rel_err(mel[P:], goldens["s2mel_mel"].T) <= 1e-4


@pytest.mark.parametrize("precision,bound", [("int8", 0.02), ("int4", 0.2)])
def test_quantized_near_float32(args, float32_model, goldens, precision, bound):
    """Quantized weights: a graph of their own, a velocity near the float32 graph's (int8 within 2%
    of its peak, int4 within 20%; not equal to it), and a mel as near upstream's."""
    model = load(args)
    assert onnx_s2mel.attach(model, TINY, "tiny", precision) == f"onnx-{precision}"
    est = model.cfm.estimator
    x, cond = inputs(est, 2)
    t = mx.array([0.6])
    ref = np.asarray(float32_model.cfm.external_velocity(x, t, cond, 30))
    err = rel_err(model.cfm.external_velocity(x, t, cond, 30), ref)
    assert 1e-5 < err <= bound, err
    mu = mx.array(np.concatenate([goldens["prompt_cond"], goldens["cond"]]))[None]
    ref_mel = mx.array(goldens["ref_mel"].T)[None]
    mel = np.asarray(model.cfm.inference(mu, ref_mel, mx.array(goldens["style"])[None],
                                         mx.array(goldens["cfm_noise"].T)[None], 25, 0.7)[0])
    err = rel_err(mel[ref_mel.shape[1]:], goldens["s2mel_mel"].T)
    assert 1e-4 < err <= bound, err


def test_cached_graph_found_again(args, float32_model, graph_cache, monkeypatch):
    """A second attach of the same checkpoint reads the cached graph: nothing is built."""
    folder = graph_cache / "converted" / "tiny" / "onnx-s2mel-float32"
    assert (folder / "s2mel_dit.onnx").is_file()
    stamp = (folder / "s2mel_dit.onnx").stat().st_mtime_ns

    def no_build(*a, **k):
        raise AssertionError("the graph was built again")

    monkeypatch.setattr(onnx_s2mel, "build_graph", no_build)
    model = load(args)
    onnx_s2mel.attach(model, TINY, "tiny")
    assert (folder / "s2mel_dit.onnx").stat().st_mtime_ns == stamp
    est = model.cfm.estimator
    x, cond = inputs(est, 1)
    ref = np.asarray(est.velocity(x, mx.array([0.5]), cond, start=10))
    assert rel_err(model.cfm.external_velocity(x, mx.array([0.5]), cond, 10), ref) <= 1e-5


@pytest.mark.parametrize("variant", [
    {"final_layer_type": "mlp"},
    {"uvit_skip_connection": False, "long_skip_connection": False},
])
def test_other_layouts_from_random_weights(args, variant):
    """An MLP final layer and a DiT without skips, from in-memory (random) weights."""
    a = dataclasses.replace(args, DiT=dataclasses.replace(args.DiT, **variant),
                            wavenet=dataclasses.replace(args.wavenet, dilation_rate=2))
    model = s2m.random_s2mel(a, seed=1)
    onnx_s2mel.attach(model)
    est = model.cfm.estimator
    x, cond = inputs(est, 2)
    t = mx.array([0.25])
    for start in (0, 30):
        ref = np.asarray(est.velocity(x, t, cond, start=start))
        assert rel_err(model.cfm.external_velocity(x, t, cond, start), ref) <= 1e-5


def test_refused(args):
    causal = s2m.random_s2mel(dataclasses.replace(args, DiT=dataclasses.replace(args.DiT, is_causal=True)))
    with pytest.raises(UsageError, match="causal"):
        onnx_s2mel.attach(causal)
    half = load(args)
    half.cfm.estimator.set_dtype(mx.float16)
    with pytest.raises(UsageError, match="float32"):
        onnx_s2mel.attach(half)
    with pytest.raises(UsageError, match="precision"):
        onnx_s2mel.attach(load(args), precision="int2")
