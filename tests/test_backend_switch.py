"""One switch per component: `--backend COMPONENT=NAME` (its alias `--code-decoder-backend`, and
``LoadOptions.backends`` in the library) reaches each component of a model; a bad one is one
line; the deprecated environment variables still map, with one warning; `ttscli models MODEL`
lists each component's backends, the default here and why.

A toy family with two components runs the CLI in this process (``ttscli.cli.main``), as a user's
command line would, through a registry file naming it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ttscli
from clitools import only_line
from ttscli.backends import select
from ttscli.backends.select import split_backend
from ttscli.cli import main
from ttscli.models import family_names, get_family, register_family, unregister_family
from ttscli.models.base import Component, Family, Pipeline
from ttscli.registry import load_registry

TOY = "toy_two_parts"
MODEL = "toy-two-parts"
SEEN: list[dict] = []


class ToyPipeline(Pipeline):
    sample_rate = 16000

    def __init__(self, backends):
        super().__init__()
        self.backends = dict(backends)

    def generate(self, request):
        yield np.zeros(1600, np.float32)


def _load(spec, checkpoint, options):
    SEEN.append(dict(options.backends))
    return ToyPipeline(options.backends)


def _family() -> Family:
    plat, vendor = select.this_machine()
    return Family(name=TOY, load=_load, components=(
        Component("code_decoder", ("mlx", "onnx"), onnx_precision=True),
        Component("vocoder", ("mlx", "onnx"), measured={(plat, vendor): "onnx"}, why="the toy ran faster there"),
    ))


@pytest.fixture
def toy(tmp_path, monkeypatch):
    register_family(_family())
    monkeypatch.setattr(select, "_warned", set())
    registry = tmp_path / "toy.toml"
    registry.write_text(f'[models."{MODEL}"]\nfamily = "{TOY}"\nimplemented = true\nsample_rate = 16000\n'
                        'backends = { code_decoder = ["mlx", "onnx"], vocoder = ["mlx", "onnx"] }\n')
    (tmp_path / "weights").mkdir()
    SEEN.clear()
    yield ["-m", MODEL, "--registry", str(registry), "--model-dir", str(tmp_path / "weights")]
    unregister_family(TOY)


def speak(toy, tmp_path, *args) -> int:
    return main(["speak", "Hi.", *toy, "-o", str(tmp_path / "out.wav"), "-q", *args])


def test_backend_reaches_each_component_through_speak(toy, tmp_path):
    assert speak(toy, tmp_path, "--backend", "code_decoder=onnx-int4", "--backend", "vocoder=mlx") == 0
    assert speak(toy, tmp_path, "--backend", "code_decoder=mlx", "--backend", "VOCODER=onnx") == 0
    assert SEEN == [{"code_decoder": "onnx-int4", "vocoder": "mlx"}, {"code_decoder": "mlx", "vocoder": "onnx"}]


def test_code_decoder_backend_is_the_alias(toy, tmp_path, capsys):
    assert speak(toy, tmp_path, "--code-decoder-backend", "onnx-f32", "--backend", "vocoder=mlx") == 0
    assert SEEN == [{"code_decoder": "onnx-f32", "vocoder": "mlx"}]
    assert speak(toy, tmp_path, "--code-decoder-backend", "onnx", "--backend", "code_decoder=mlx") == 2
    assert "disagree" in only_line(capsys.readouterr().err)


def test_load_options_reach_each_component_with_defaults_for_the_rest(toy):
    reg = load_registry([toy[3]])
    pipe = ttscli.load(MODEL, registry=reg, model_dir=toy[5], backends={"code_decoder": "onnx"})
    # the vocoder's measured default on this machine is onnx (the toy's table names this machine)
    assert pipe.backends == {"code_decoder": "onnx", "vocoder": "onnx"}
    assert ttscli.load(MODEL, registry=reg, model_dir=toy[5], backends={"vocoder": "mlx"}).backends == {
        "code_decoder": "mlx", "vocoder": "mlx"}


@pytest.mark.parametrize("args, message", [
    (["--backend", "nope=mlx"], f"error: --backend nope=mlx: {MODEL} has no component 'nope' "
                                f"(its components: code_decoder, vocoder; see `ttscli models {MODEL}`)"),
    (["--backend", "vocoder=coreml"], f"error: --backend vocoder=coreml: {MODEL}'s vocoder runs on mlx, onnx, "
                                      "not 'coreml'"),
    (["--backend", "vocoder=onnx-int4"], "takes no precision suffix"),
    (["--backend", "vocoder"], "give COMPONENT=BACKEND"),
    (["--code-decoder-backend", "coreml"], "runs on mlx, onnx, not 'coreml'"),
])
def test_a_bad_backend_is_one_line_and_exit_2(toy, tmp_path, capsys, args, message):
    assert speak(toy, tmp_path, *args) == 2
    assert message in only_line(capsys.readouterr().err)
    assert SEEN == [] and not (tmp_path / "out.wav").exists()


def test_deprecated_environment_variable_maps_with_one_warning(toy, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TTSCLI_HIFT_BACKEND", "mlx")
    assert speak(toy, tmp_path) == 0
    assert speak(toy, tmp_path) == 0
    assert SEEN == [{"code_decoder": "mlx", "vocoder": "mlx"}] * 2
    assert only_line(capsys.readouterr().err) == ("warning: TTSCLI_HIFT_BACKEND is deprecated and goes in the next "
                                                  "release; use --backend vocoder=mlx")
    assert speak(toy, tmp_path, "--backend", "vocoder=onnx") == 0     # the option wins
    assert SEEN[-1]["vocoder"] == "onnx"


def test_models_lists_components_backends_and_the_default_here(toy, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["models", MODEL, "--registry", toy[3], "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    plat, vendor = select.this_machine()
    where = f"measured default on {plat}/{vendor}" if vendor else f"default on {plat}"
    assert info["components"] == [
        {"name": "code_decoder", "backends": ["mlx", "onnx"], "default": "mlx", "why": "the default",
         "onnx_precision": True},
        {"name": "vocoder", "backends": ["mlx", "onnx"], "default": "onnx",
         "why": f"{where} (the toy ran faster there)", "onnx_precision": False}]
    assert main(["models", MODEL, "--registry", toy[3]]) == 0
    shown = capsys.readouterr().out
    assert "--backend COMPONENT=NAME" in shown and "default here" in shown and "the toy ran faster there" in shown


def test_the_measured_default_falls_back_where_it_cannot_run(toy, monkeypatch):
    monkeypatch.setattr(select, "available", lambda b: (False, "onnxruntime is not installed") if b == "onnx"
                        else (True, ""))
    reg = load_registry([toy[3]])
    spec = reg.resolve(MODEL)
    chosen = select.resolve(spec, _family())["vocoder"]
    assert (chosen.backend, chosen.why) == ("mlx", "onnx cannot run here (onnxruntime is not installed)")


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["batch", "rows.jsonl", "-o", "out"]])
def test_serve_and_batch_refuse_a_bad_backend_before_loading(run_cli, tmp_path, command):
    (tmp_path / "rows.jsonl").write_text('{"id": "a", "text": "Hi."}\n')
    p = run_cli(*command, "-m", "piper-joe", "--backend", "vits=tpu", timeout=120)
    assert p.returncode == 2
    assert only_line(p.err) == "error: --backend vits=tpu: piper-joe's vits runs on mlx, onnx, not 'tpu'"


@pytest.mark.parametrize("name", sorted(family_names()))
def test_each_family_declares_its_components_with_several_backends(name):
    """A registry component that can run on more than one backend has a declared default (the
    measured table, or the default itself), and the declaration covers what the registry lists."""
    fam = get_family(name)
    for spec in load_registry():
        if spec.family != name:
            continue
        for component, listed in spec.backends.items():
            declared = fam.component(component)
            if len(listed) > 1:
                assert declared is not None, f"{spec.id}: {component} runs on {listed} with no declared default"
            if declared is not None:
                assert set(listed) <= set(declared.backends), (spec.id, component)
                defaults = {declared.default, *declared.measured.values()}
                # a default may name an ONNX precision (onnx-f32) where the component takes one
                bases = {split_backend(d)[0] if declared.onnx_precision else d for d in defaults}
                assert bases <= set(declared.backends), component
                assert declared.follows is None or fam.component(declared.follows) is not None, component


@pytest.mark.parametrize("name", [n for n in sorted(family_names()) if "coreml" in get_family(n).convert])
def test_the_declared_coreml_capacity_is_the_converters_own(name):
    import importlib
    import inspect

    convert = importlib.import_module(f"ttscli.models.{name}.coreml_export").convert_coreml
    assert get_family(name).coreml_capacity == inspect.signature(convert).parameters["capacity"].default
