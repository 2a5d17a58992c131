"""The one rule behind every component's default (ttscli.backends.select.default_choice): MLX on a
GPU where the component says so, else the measured table for this platform and CPU vendor, else
for the platform, else the declared default; a pick that cannot run here falls back to the default."""
from __future__ import annotations

import pytest

from ttscli.backends import select
from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.models.base import Component, Family
from ttscli.registry import ModelSpec

TABLE = {("linux", "AuthenticAMD"): "onnx", ("linux", ""): "mlx", ("darwin", ""): "onnx"}
WIDGET = Component("widget", ("mlx", "onnx"), measured=TABLE, why="measured on the bench")


@pytest.fixture
def machine(monkeypatch):
    def at(plat, vendor="", gpu=False, onnx=True):
        monkeypatch.setattr(select, "this_machine", lambda: (plat, vendor))
        monkeypatch.setattr(select, "mlx_on_gpu", lambda: gpu)
        monkeypatch.setattr(select, "available",
                            lambda b: (True, "") if onnx or b != "onnx" else (False, "onnxruntime is not installed"))
    return at


@pytest.mark.parametrize("where, expect", [
    (("linux", "AuthenticAMD"), ("onnx", "measured default on linux/AuthenticAMD (measured on the bench)")),
    (("linux", "GenuineIntel"), ("mlx", "default on linux (measured on the bench)")),
    (("darwin", ""), ("onnx", "default on darwin (measured on the bench)")),
    (("win32", ""), ("mlx", "the default")),
])
def test_the_table_is_read_vendor_first_then_platform(machine, where, expect):
    machine(*where)
    choice = select.default_choice(WIDGET)
    assert (choice.backend, choice.why) == expect


def test_gpu_and_random_weights_come_first(machine):
    machine("linux", "AuthenticAMD", gpu=True)
    assert select.default_choice(WIDGET).backend == "onnx"           # no on_gpu: the table
    gpu = Component("widget", ("mlx", "onnx"), measured=TABLE, on_gpu="mlx", random_weights="mlx")
    assert select.default_choice(gpu) == select.Choice("mlx", "MLX runs on the GPU here")
    machine("linux", "AuthenticAMD")
    assert select.default_choice(gpu, random_weights=True) == select.Choice("mlx", "random weights run on mlx")


def test_a_default_never_lands_on_what_is_not_installed(machine):
    machine("linux", "AuthenticAMD", onnx=False)
    assert select.default_choice(WIDGET) == select.Choice("mlx", "onnx cannot run here (onnxruntime is not installed)")


def test_asking_for_what_is_not_installed_is_one_line(machine):
    machine("linux", "AuthenticAMD", onnx=False)
    spec = ModelSpec(id="w", name="w", family="wf", sample_rate=16000, backends={"widget": ["mlx", "onnx"]})
    fam = Family(name="wf", load=lambda *a: None, components=(WIDGET,))
    with pytest.raises(BackendUnavailableError, match=r"^--backend widget=onnx: onnxruntime is not installed$"):
        select.resolve(spec, fam, {"widget": "onnx"})


def test_a_follower_runs_with_its_leader():
    spec = ModelSpec(id="w", name="w", family="wf", sample_rate=16000,
                     backends={"code_decoder": ["mlx", "coreml", "onnx"], "code_predictor": ["mlx", "onnx"]})
    fam = Family(name="wf", load=lambda *a: None, components=(
        Component("code_decoder", ("mlx", "coreml", "onnx"), onnx_precision=True),
        Component("code_predictor", ("mlx", "onnx"), follows="code_decoder")))
    chosen = select.resolve(spec, fam, {"code_decoder": "onnx-int4"})
    assert {c: ch.backend for c, ch in chosen.items()} == {"code_decoder": "onnx-int4", "code_predictor": "onnx"}
    assert select.resolve(spec, fam)["code_predictor"].backend == "mlx"
    with pytest.raises(UsageError, match=r"^--backend code_predictor=onnx: w's code_predictor runs where its "
                                         r"code_decoder does \(mlx here\)"):
        select.resolve(spec, fam, {"code_predictor": "onnx"})
    assert select.resolve(spec, fam, {"code_decoder": "onnx", "code_predictor": "onnx"})["code_predictor"].backend \
        == "onnx"
