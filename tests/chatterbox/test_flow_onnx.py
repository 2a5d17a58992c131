"""S3Gen's flow estimator on onnxruntime (s3gen/onnx_flow.py) on the tiny fixtures the S3Gen tests
use: the graph against the MLX estimator on the same inputs, the flow's mel and S3Gen's waveform
with the onnx estimator against upstream's goldens (chatterbox-tts 0.1.7, recorded noise and
source draws; the MLX tests' own helpers), a perturbed weight failing them, the cache by source
hash (stale: rebuilt) and by fingerprint (random weights), and the backend choice."""
import sys
from pathlib import Path

import numpy as np
import pytest

import ttscli  # noqa: F401  (BLAS preload before mlx)

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
mx = pytest.importorskip("mlx.core")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "codecs" / "s3gen"))
import test_s3gen_flow as flow_cases  # the MLX flow tests: fixtures and helpers
import test_s3gen_model as s3_cases

from ttscli.backends.coreml.weights import ArrayWeights
from ttscli.backends.onnx.convert import mlx_params
from ttscli.backends.onnx.manifest import read_manifest
from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.codecs.s3gen import onnx_flow
from ttscli.codecs.s3gen.onnx_flow import (
    PREFIX, OnnxEstimator, attach, export_estimator, find_or_build,
)

flow, golden = flow_cases.flow, flow_cases.golden        # module-scoped fixtures, reused
s3, g = s3_cases.s3, s3_cases.g
TINY = s3_cases.TINY
BOUND = 1e-4


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TTSCLI_CACHE", str(tmp_path_factory.mktemp("flow-onnx-cache")))
    yield
    mp.undo()


def _graph(module_flow, out_dir: Path, perturb: str | None = None) -> OnnxEstimator:
    """The estimator graph of ``module_flow``'s weights (one tensor offset when ``perturb``)."""
    params = {k: np.array(v) for k, v in mlx_params(module_flow.decoder.estimator, lambda k: True,
                                                     prefix=PREFIX).items()}
    if perturb:
        params[PREFIX + perturb] = params[PREFIX + perturb] + np.float32(0.05)
    export_estimator(ArrayWeights(params), module_flow.a, out_dir, model_id="test",
                     source_record={"checkpoint": "test", "files": {}})
    return OnnxEstimator(out_dir)


def _inputs(T: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x, mu, cond = (rng.standard_normal((2, T, 80)).astype(np.float32) for _ in range(3))
    mu[1], cond[1], cond[:, T // 2:] = 0, 0, 0          # as CFG's unconditional row and a prompt
    spks = rng.standard_normal((2, 80)).astype(np.float32)
    spks[1] = 0
    return [mx.array(a) for a in (x, mu, np.array([0.37, 0.37], np.float32), spks, cond)]


def test_estimator_matches_mlx(flow, tmp_path):
    est = _graph(flow, tmp_path / "g")
    for T in (7, 58):                                     # one graph, any length
        args = _inputs(T, T)
        ref = np.array(flow.decoder.estimator(*args))
        got = np.array(est(*args))
        assert got.shape == ref.shape == (2, T, 80)
        assert np.abs(got - ref).max() <= BOUND


@pytest.fixture(scope="module")
def onnx_s3(s3):
    """The tiny S3Gen with its estimator on onnxruntime, built from the checkpoint folder."""
    attach(s3.flow, TINY, "tiny")
    yield s3
    s3.flow.decoder.external_estimator = None


def test_mel_with_upstream_noise(flow, golden, tmp_path):
    flow.decoder.external_estimator = _graph(flow, tmp_path / "g")
    try:
        mel = np.array(flow_cases._mel(flow, golden, noise=mx.array(golden["noise"].T)))
    finally:
        flow.decoder.external_estimator = None
    assert mel.shape == golden["mel"].T.shape
    assert np.abs(mel - golden["mel"].T).max() <= BOUND


def test_perturbed_weight_fails(flow, golden, tmp_path):
    flow.decoder.external_estimator = _graph(flow, tmp_path / "g", perturb="mid_blocks.1.1.0.ff.net.2.weight")
    try:
        mel = np.array(flow_cases._mel(flow, golden, noise=mx.array(golden["noise"].T)))
    finally:
        flow.decoder.external_estimator = None
    assert np.abs(mel - golden["mel"].T).max() > 100 * BOUND


def test_generate_waveform(onnx_s3, g):
    assert isinstance(onnx_s3.flow.decoder.external_estimator, OnnxEstimator)
    wav = onnx_s3.generate(g["speech_tokens"], s3_cases._ref(g), noise=g["cfm_noise"][None],
                           source_draws=s3_cases._draws(g))
    assert wav.shape == g["wav"].shape
    assert np.abs(wav - g["wav"]).max() <= BOUND


def test_checkpoint_cache_and_stale_rebuild(tmp_path, monkeypatch):
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "s3gen.safetensors").write_bytes((TINY / "s3gen.safetensors").read_bytes())
    from ttscli.codecs.s3gen import load_s3gen

    def flow_of(folder):
        return load_s3gen(folder / "s3gen.safetensors").flow

    folder = find_or_build(flow_of(ck), ck, "tiny")
    assert folder.name == onnx_flow.VARIANT
    made = (folder / onnx_flow.FILE).stat().st_mtime_ns
    assert find_or_build(flow_of(ck), ck, "tiny") == folder and (folder / onnx_flow.FILE).stat().st_mtime_ns == made
    # a changed checkpoint: the conversion is stale and rebuilt from the new weights
    w = mx.load(str(ck / "s3gen.safetensors"))
    key = "flow." + "decoder.estimator.final_proj.bias"
    w[key] = w[key] + 1.0
    mx.save_safetensors(str(ck / "s3gen.safetensors"), w)
    again = find_or_build(flow_of(ck), ck, "tiny")
    assert (again / onnx_flow.FILE).stat().st_mtime_ns != made
    src = read_manifest(again)["source"]["files"]["s3gen.safetensors"]
    assert src["size"] == (ck / "s3gen.safetensors").stat().st_size


def test_random_weights_build_is_cached(flow):
    a = onnx_flow.build_from_model(flow)
    assert a == onnx_flow.build_from_model(flow)
    assert read_manifest(a)["source"]["checkpoint"] == "MLX model weights"


def test_choice(monkeypatch):
    from ttscli.backends.select import resolve
    from ttscli.models import family_of
    from ttscli.registry import load_registry

    spec = load_registry().resolve("chatterbox")
    fam = family_of(spec)
    assert resolve(spec, fam, {"flow_estimator": "MLX"})["flow_estimator"].backend == "mlx"
    assert resolve(spec, fam, {"flow_estimator": "onnx"})["flow_estimator"].backend == "onnx"
    with pytest.raises(UsageError, match="runs on mlx, onnx, not 'coreml'"):
        resolve(spec, fam, {"flow_estimator": "coreml"})
    expect = "onnx" if sys.platform.startswith("linux") and mx.default_device() == mx.cpu else "mlx"
    assert resolve(spec, fam)["flow_estimator"].backend == expect
    import ttscli.backends.onnx as onnx_pkg

    monkeypatch.setattr(onnx_pkg, "onnx_available", lambda: (False, "onnxruntime is not installed"))
    assert resolve(spec, fam)["flow_estimator"].backend == "mlx"
    with pytest.raises(BackendUnavailableError, match="not installed"):
        resolve(spec, fam, {"flow_estimator": "onnx"})

def test_float16_estimator_is_refused(flow):
    from ttscli.codecs.s3gen.flow import CausalMaskedDiffWithXvec

    half = CausalMaskedDiffWithXvec(flow.a)
    half.set_dtype(mx.float16)
    with pytest.raises(UsageError, match="float32"):
        attach(half, None)


@pytest.mark.parametrize("backend", ["mlx", "onnx"])
def test_pipeline_reports_the_flow_backend(backend):
    from ttscli.models.base import LoadOptions
    from ttscli.models.chatterbox.load import load_pipeline

    pipe = load_pipeline(None, TINY, LoadOptions(backends={"flow_estimator": backend}))
    assert pipe.backends["flow_estimator"] == backend
    assert isinstance(pipe.s3gen.flow.decoder.external_estimator, OnnxEstimator) == (backend == "onnx")
    from ttscli.models.chatterbox.family import FAMILY

    assert FAMILY.bench_components(pipe, None)["s3gen_flow_onnx"] == float(backend == "onnx")


def test_pipeline_refuses_other_flow_backends():
    from ttscli.models.base import LoadOptions
    from ttscli.models.chatterbox.load import load_pipeline

    with pytest.raises(BackendUnavailableError, match="flow_estimator: mlx or onnx"):
        load_pipeline(None, TINY, LoadOptions(backends={"flow_estimator": "coreml"}))


def test_parity_against_onnx_f32_checks_the_flow():
    from ttscli.models.chatterbox.parity import parity_checks

    checks = {c.name: c for c in parity_checks(None, TINY, against="onnx-f32", frames=3)}
    c = checks["S3Gen mel, flow estimator mlx vs onnx-float32 (max abs / peak)"]
    assert c.passed and c.value <= 1e-5
