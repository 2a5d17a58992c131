"""VoxCPM2's base and residual LMs as Core ML packages: the packages' MIL programs (run with
numpy, tests/coreml/mil_interp.py) in the patch loop against the upstream package's goldens
(scripts/goldens/voxcpm2_upstream.py). Running the packages themselves needs macOS."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("coremltools")
mx = pytest.importorskip("mlx.core")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coreml"))
from mil_interp import InterpretedModel

from ttscli.backends.coreml.decoder import CoreMLStack
from ttscli.backends.coreml.manifest import read_manifest
from ttscli.models.voxcpm2.coreml_export import STACKS, export_coreml
from ttscli.models.voxcpm2.generate import Prompt, patches, prefill
from ttscli.models.voxcpm2.load import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "voxcpm2"
G = np.load(FIX / "goldens.npz")
MODES = ("plain", "clone", "continuation", "clone_continuation")
CAPACITY = 64         # the longest prompt (40 positions) and its 5 patches


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    out = {}
    for precision in ("float32", "float16"):
        folder = tmp_path_factory.mktemp(f"voxcpm2-coreml-{precision}")
        out[precision] = folder, export_coreml(FIX / "tiny", folder, model_id="voxcpm2-tiny", capacity=CAPACITY,
                                               precision=precision)
    return out


def coreml_model(packages, precision: str):
    folder, manifest = packages[precision]
    m = load_model(FIX / "tiny")
    stacks = tuple(CoreMLStack(InterpretedModel(folder / manifest["components"][n]["path"],
                                                fp16=precision == "float16"), manifest["components"][n], n,
                              instead="--backend lm=mlx")
                   for n, _ in STACKS)
    m.use_converted_stacks(lambda: stacks)
    assert not m.base_lm.layers and not m.residual_lm.layers      # the packages hold the weights
    return m


def prompt(mode: str) -> Prompt:
    return Prompt(mx.array(G[f"{mode}_tokens"]), mx.array(G[f"{mode}_text_mask"]),
                  mx.array(G[f"{mode}_feat"]), mx.array(G[f"{mode}_feat_mask"]))


def cos(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_manifest_holds_both_stacks_without_heads(packages):
    folder, manifest = packages["float32"]
    assert read_manifest(folder)["family"] == "voxcpm2"
    for name, file in STACKS:
        entry = manifest["components"][name]
        assert entry["path"] == file and entry["vocab_size"] is None and entry["capacity"] == CAPACITY
    assert manifest["components"]["residual_lm"]["lm"]["rope"]["type"] == "none"
    assert manifest["components"]["base_lm"]["lm"]["residual_scale"] != 1.0       # muP's branch scale


@pytest.mark.parametrize("mode", MODES)
def test_prefill_hidden_matches_upstream(packages, mode):
    pre = prefill(coreml_model(packages, "float32"), prompt(mode))
    assert cos(pre.base_hidden, G[f"{mode}_base_hidden"]) >= 0.99999
    assert cos(pre.residual_all, G[f"{mode}_residual_hidden"]) >= 0.99999


@pytest.mark.parametrize("mode", ["plain", "clone_continuation"])
def test_patches_and_stops_with_recorded_noise_match_upstream(packages, mode):
    """float32 compute: upstream's patches within 1e-4 of their peak, the stop decisions agree."""
    noise = G[f"{mode}_noise"]
    out = list(patches(coreml_model(packages, "float32"), prompt(mode),
                       lambda i: mx.array(noise[i].transpose(0, 2, 1)), steps=10, cfg_value=2.0, max_len=12))
    ours = np.concatenate([np.array(p) for p, _ in out])
    want = G[f"{mode}_patches"]
    assert ours.shape == want.shape
    np.testing.assert_allclose(ours, want, atol=1e-4 * np.abs(want).max())
    stops = np.concatenate([np.array(s) for _, s in out]).argmax(-1)
    np.testing.assert_array_equal(stops, G[f"{mode}_stop_logits"].argmax(-1))


@pytest.mark.parametrize("mode", ["plain", "clone_continuation"])
def test_float16_packages_follow_upstream_as_half_precision_does(packages, mode):
    """float16 compute, fp16 rounding of every fp16 result (as a Mac computes): the prefill's
    hidden states, and the first two patches within 1e-2 of their peak. Later patches drift, as
    MLX's own float16 model drifts on this fixture (each patch is fed back to the LMs)."""
    m = coreml_model(packages, "float16")
    pre = prefill(m, prompt(mode))
    assert cos(pre.base_hidden, G[f"{mode}_base_hidden"]) >= 0.999
    assert cos(pre.residual_all, G[f"{mode}_residual_hidden"]) >= 0.999
    noise = G[f"{mode}_noise"]
    out = [p for p, _ in zip(patches(m, prompt(mode), lambda i: mx.array(noise[i].transpose(0, 2, 1)), steps=10,
                                     cfg_value=2.0, max_len=2, min_len=2), range(2))]
    ours = np.concatenate([np.array(p) for p, _ in out])
    want = G[f"{mode}_patches"]
    np.testing.assert_allclose(ours, want[:2], atol=1e-2 * np.abs(want).max())


def test_positions_past_the_capacity_are_refused(packages):
    from ttscli.errors import GenerationError

    m = coreml_model(packages, "float32")
    base, _ = m.converted_stacks
    with pytest.raises(GenerationError, match="base lm holds 64 positions .* need 65; .* use --backend lm=mlx"):
        base(input_embeddings=mx.zeros((1, CAPACITY + 1, base.hidden_size)), cache=base.make_cache())


def test_a_request_past_the_packages_capacity_is_refused_before_any_work(packages):
    from ttscli import api
    from ttscli.errors import UsageError
    from ttscli.models.base import Request

    pipe = api.load("voxcpm2", model_dir=FIX / "tiny")
    stacks = coreml_model(packages, "float32").converted_stacks
    pipe.model.use_converted_stacks(lambda: stacks)
    with pytest.raises(UsageError, match="exceed the Core ML packages' 64-position context"):
        list(pipe.generate(Request(text="Hello world.", max_frames=62)))
    assert pipe.rows() is None              # the packages hold the weights: requests go one at a time
