"""S3Gen's HiFT decode on onnxruntime (s3gen/onnx_hift.py) on the tiny fixtures the HiFT and S3Gen
tests use: the graph against the MLX decode on the same inputs, the waveform against upstream's
goldens (chatterbox-tts 0.1.7, recorded source draws; the MLX tests' own fixtures and helpers), a
perturbed weight failing them, the cache by source hash (stale: rebuilt) and by fingerprint
(random weights), the backend choice and the pipeline's wiring."""
import sys
from pathlib import Path

import numpy as np
import pytest

import ttscli  # noqa: F401  (BLAS preload before mlx)

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
mx = pytest.importorskip("mlx.core")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "codecs" / "s3gen"))
import test_s3gen_hift as hift_cases  # the MLX HiFT tests: fixtures (upstream goldens)
import test_s3gen_model as s3_cases

from ttscli.backends.coreml.weights import ArrayWeights
from ttscli.backends.onnx.manifest import read_manifest
from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.codecs.s3gen import onnx_hift
from ttscli.codecs.s3gen.hift import SourceDraws
from ttscli.codecs.s3gen.onnx_hift import (
    PREFIX, OnnxDecode, attach, export_decode, find_or_build,
)

hift, golden = hift_cases.hift, hift_cases.golden      # module-scoped fixtures, reused
s3, g = s3_cases.s3, s3_cases.g
TINY = s3_cases.TINY
BOUND = 1e-4


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TTSCLI_CACHE", str(tmp_path_factory.mktemp("hift-onnx-cache")))
    yield
    mp.undo()


def _graph(module_hift, out_dir: Path, perturb: str | None = None) -> OnnxDecode:
    """The decode graph of ``module_hift``'s weights (one tensor offset when ``perturb``)."""
    params = {k: np.array(v) for k, v in onnx_hift._params(module_hift).items()}
    if perturb:
        params[PREFIX + perturb] = params[PREFIX + perturb] + np.float32(0.05)
    export_decode(ArrayWeights(params), module_hift.a, out_dir, model_id="test",
                  source_record={"checkpoint": "test", "files": {}})
    return OnnxDecode(out_dir)


def test_decode_matches_mlx(hift, golden, tmp_path):
    dec = _graph(hift, tmp_path / "g")
    rng = np.random.default_rng(0)
    for T in (5, 24):                                     # one graph, any length
        mel = mx.array(rng.standard_normal((T, 80)).astype(np.float32) - 4)
        source = mx.array(np.tanh(rng.standard_normal(T * 480)).astype(np.float32) * 0.1)
        ref = np.array(hift.decode(mel, source))
        got = np.array(dec(mel, source))
        assert got.shape == ref.shape == (T * 480,)
        assert np.abs(got - ref).max() <= BOUND


def test_waveform_with_recorded_draws(hift, golden, tmp_path):
    hift.external_decode = _graph(hift, tmp_path / "g")
    try:
        draws = SourceDraws(mx.array(golden["phase"]), mx.array(golden["sine_noise"].T))
        wav, _ = hift(mx.array(golden["mel"].T), draws)
        from_source = hift.decode(mx.array(golden["mel"].T), mx.array(golden["source"]))
    finally:
        hift.external_decode = None
    assert wav.shape == golden["wav"].shape
    assert np.abs(np.array(wav) - golden["wav"]).max() <= BOUND
    assert np.abs(np.array(from_source) - golden["wav"]).max() <= 1e-5    # the MLX test's bound


@pytest.mark.parametrize("perturb", ["resblocks.7.convs2.1.weight", "source_resblocks.0.activations1.2.alpha"])
def test_perturbed_weight_fails(hift, golden, tmp_path, perturb):
    dec = _graph(hift, tmp_path / "g", perturb=perturb)
    wav = np.array(dec(mx.array(golden["mel"].T), mx.array(golden["source"])))
    assert np.abs(wav - golden["wav"]).max() > 100 * BOUND


@pytest.fixture(scope="module")
def onnx_s3(s3):
    """The tiny S3Gen with HiFT's decode on onnxruntime, built from the checkpoint folder."""
    attach(s3.mel2wav, TINY, "tiny")
    yield s3
    s3.mel2wav.external_decode = None


def test_generate_waveform(onnx_s3, g):
    assert isinstance(onnx_s3.mel2wav.external_decode, OnnxDecode)
    wav = onnx_s3.generate(g["speech_tokens"], s3_cases._ref(g), noise=g["cfm_noise"][None],
                           source_draws=s3_cases._draws(g))
    assert wav.shape == g["wav"].shape
    assert np.abs(wav - g["wav"]).max() <= BOUND


def test_checkpoint_cache_and_stale_rebuild(s3, tmp_path, monkeypatch):
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "s3gen.safetensors").write_bytes((TINY / "s3gen.safetensors").read_bytes())
    folder = find_or_build(s3.mel2wav, ck, "tiny")
    assert folder.name == onnx_hift.VARIANT
    made = (folder / onnx_hift.FILE).stat().st_mtime_ns
    assert find_or_build(s3.mel2wav, ck, "tiny") == folder
    assert (folder / onnx_hift.FILE).stat().st_mtime_ns == made
    w = mx.load(str(ck / "s3gen.safetensors"))
    key = "mel2wav.conv_post.bias"
    w[key] = w[key] + 1.0
    mx.save_safetensors(str(ck / "s3gen.safetensors"), w)
    again = find_or_build(s3.mel2wav, ck, "tiny")                 # stale: rebuilt
    assert (again / onnx_hift.FILE).stat().st_mtime_ns != made
    src = read_manifest(again)["source"]["files"]["s3gen.safetensors"]
    assert src["size"] == (ck / "s3gen.safetensors").stat().st_size


def test_random_weights_build_is_cached(hift):
    a = onnx_hift.build_from_model(hift)
    assert a == onnx_hift.build_from_model(hift)
    assert read_manifest(a)["source"]["checkpoint"] == "MLX model weights"


def test_choice(monkeypatch):
    from ttscli.backends.select import resolve
    from ttscli.models import family_of
    from ttscli.registry import load_registry

    spec = load_registry().resolve("chatterbox")
    fam = family_of(spec)
    assert resolve(spec, fam, {"vocoder": "MLX"})["vocoder"].backend == "mlx"
    assert resolve(spec, fam, {"vocoder": "onnx"})["vocoder"].backend == "onnx"
    with pytest.raises(UsageError, match="runs on mlx, onnx, not 'coreml'"):
        resolve(spec, fam, {"vocoder": "coreml"})
    expect = "onnx" if sys.platform.startswith("linux") and mx.default_device() == mx.cpu else "mlx"
    assert resolve(spec, fam)["vocoder"].backend == expect
    import ttscli.backends.onnx as onnx_pkg

    monkeypatch.setattr(onnx_pkg, "onnx_available", lambda: (False, "onnxruntime is not installed"))
    assert resolve(spec, fam)["vocoder"].backend == "mlx"
    with pytest.raises(BackendUnavailableError, match="not installed"):
        resolve(spec, fam, {"vocoder": "onnx"})

def test_float16_weights_are_refused(hift):
    from ttscli.codecs.s3gen.hift import HiFTGenerator

    half = HiFTGenerator(hift.a)
    half.set_dtype(mx.float16)
    with pytest.raises(UsageError, match="float32"):
        attach(half, None)


@pytest.mark.parametrize("backend", ["mlx", "onnx"])
def test_pipeline_reports_the_vocoder_backend(backend):
    from ttscli.models.base import LoadOptions
    from ttscli.models.chatterbox.family import FAMILY
    from ttscli.models.chatterbox.load import load_pipeline

    pipe = load_pipeline(None, TINY, LoadOptions(backends={"vocoder": backend}))
    assert pipe.backends["vocoder"] == backend
    assert isinstance(pipe.s3gen.mel2wav.external_decode, OnnxDecode) == (backend == "onnx")
    assert FAMILY.bench_components(pipe, None)["s3gen_hift_onnx"] == float(backend == "onnx")


def test_pipeline_refuses_other_vocoder_backends():
    from ttscli.models.base import LoadOptions
    from ttscli.models.chatterbox.load import load_pipeline

    with pytest.raises(BackendUnavailableError, match="vocoder: mlx or onnx"):
        load_pipeline(None, TINY, LoadOptions(backends={"vocoder": "coreml"}))


def test_parity_against_onnx_f32_checks_hift():
    from ttscli.models.chatterbox.parity import parity_checks

    checks = {c.name: c for c in parity_checks(None, TINY, against="onnx-f32", frames=3)}
    c = checks["S3Gen wave, HiFT decode mlx vs onnx-float32 (max abs / peak)"]
    assert c.passed and 0 < c.value <= 1e-5
