"""Breeze TTS 2's backbone as a Core ML code decoder, built from the tiny published-layout checkpoint
by the shared stateful LM export.

On Linux the package is built and saved, and its own MIL program (as serialised, run with numpy by
tests/coreml/mil_interp.py) is checked against the upstream goldens (scripts/goldens/breeze_tiny.py):
prefill hidden/logits of every mode and 20/20 greedy frames (all 16 codes), with CFG's two branches
each in its own state. The same checks through the real Core ML runtime run on macOS 15+ only
(``pytest -m macos``)."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("coremltools")
mx = pytest.importorskip("mlx.core")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coreml"))
from mil_interp import InterpretedModel

from ttscli.backends.coreml import coreml_available
from ttscli.backends.coreml.decoder import CoreMLCodeDecoder
from ttscli.backends.coreml.manifest import built_from, for_checkpoint, read_manifest
from ttscli.backends.decoder import RowwiseDecoder
from ttscli.errors import CheckpointError, GenerationError

from breeze_cases import TINY, cos, greedy, prompts_for, read_goldens

MODEL_ID = "breeze-tts-2"
CAPACITY = 112            # the longest prompt (79, voice direction) + 20 frames + EOS check
CASES = ["plain", "design", "design_cfg", "clone", "direction", "direction_cfg", "design_cfg0"]
SOURCE = ("config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
          "model-00002-of-00002.safetensors")

_ok, _why = coreml_available()



@pytest.fixture(scope="module")
def goldens():
    return read_goldens()


@pytest.fixture(scope="module")
def loaded():
    from ttscli.models.breeze_tts.load import load_model, load_tokenizer

    model, _ = load_model(TINY)
    return model, load_tokenizer(TINY, model.args)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """(folder, manifest): fp32 compute (fp16 weights and KV cache), so a graph error is not
    hidden behind fp16 rounding."""
    from ttscli.models.breeze_tts.coreml_export import export_coreml

    out = tmp_path_factory.mktemp("breeze-coreml")
    return out, export_coreml(TINY, out, model_id=MODEL_ID, capacity=CAPACITY, precision="float32")


def interpreted(package) -> CoreMLCodeDecoder:
    folder, manifest = package
    entry = manifest["components"]["code_decoder"]
    return CoreMLCodeDecoder(InterpretedModel(folder / entry["path"], fp16=False), entry)






# ------------------------------------------------------------------ the package and its manifest
def test_package_saved_with_its_inputs_outputs_states(package, loaded):
    import coremltools as ct

    from ttscli.backends.coreml.export import describe_spec

    folder, manifest = package
    model, _ = loaded
    a = model.args
    assert read_manifest(folder) == manifest
    assert (manifest["model"], manifest["family"], manifest["format"]) == (MODEL_ID, "breeze_tts", "ttscli-coreml")
    assert set(manifest["components"]) == {"code_decoder"}
    entry = manifest["components"]["code_decoder"]
    assert entry["path"] == "backbone.mlpackage" and (folder / entry["path"]).is_dir()
    assert sorted(p.name for p in folder.iterdir()) == ["backbone.mlpackage", "manifest.json"]
    H, d, L, kv = a.hidden_size, a.backbone.head_dim, a.backbone.num_hidden_layers, a.backbone.num_key_value_heads
    cache = [L, kv, CAPACITY, d]
    assert entry["inputs"] == [{"name": "inputs_embeds", "shape": [1, 1, H], "dtype": "float32"},
                               {"name": "position", "shape": [1], "dtype": "int32"}]
    # the head is codebook 0's classes plus the EOS class
    assert entry["outputs"] == [{"name": "logits", "shape": [1, a.vocab_size + 1], "dtype": "float32"},
                                {"name": "hidden", "shape": [1, H], "dtype": "float32"}]
    assert entry["states"] == [{"name": "key_cache", "shape": cache, "dtype": "float16"},
                               {"name": "value_cache", "shape": cache, "dtype": "float16"}]
    assert (entry["kind"], entry["capacity"], entry["vocab_size"], entry["hidden_size"]) == \
        ("stateful_lm_step", CAPACITY, 2052, H)
    assert entry["cache_shape"] == cache and entry["weights"] == "float16"
    # the backbone's own config (not the decoy top-level RoPE/eps fields)
    lm = entry["lm"]
    assert lm["qk_norm"] and lm["rope"]["theta"] == 1e6 and lm["rope"]["type"] == "default"
    assert lm["rms_norm_eps"] == 1e-6 and lm["num_hidden_layers"] == L
    # what was saved is what the manifest says
    assert describe_spec(ct.utils.load_spec(str(folder / entry["path"]))) == \
        {k: entry[k] for k in ("inputs", "outputs", "states")}


def test_manifest_source_hashes_every_file_read(package, tmp_path):
    folder, manifest = package
    files = manifest["source"]["files"]
    assert sorted(files) == sorted(SOURCE)
    for rel in SOURCE:
        raw = (TINY / rel).read_bytes()
        assert files[rel] == {"sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}
    assert built_from(manifest, TINY)
    other = tmp_path / "ck"
    shutil.copytree(TINY, other, ignore=shutil.ignore_patterns("audio_tokenizer"))
    assert built_from(manifest, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["backbone_config"]["rms_norm_eps"] = 1e-5          # baked into the package: stale
    (other / "config.json").write_text(json.dumps(cfg))
    assert not built_from(manifest, other)


def test_int8_package(tmp_path):
    from ttscli.models.breeze_tts.coreml_export import export_coreml

    m = export_coreml(TINY, tmp_path, model_id=MODEL_ID, capacity=16, weights_8bit=True)
    entry = m["components"]["code_decoder"]
    assert entry["weights"] == "int8-linear-symmetric-per-channel" and entry["compute_precision"] == "float16"


def test_int8_when_the_capacity_equals_a_projection_width(tmp_path):
    """At the real size a 1024-position package is as wide as the backbone's k/v projections
    (8 x 128): the mask's constants must not be merged with those projections' zero biases, which
    int8 weights then refuse (it did, at `convert --to coreml -q --q-bits 8 --capacity 1024`).
    The same clash at the tiny width: k/v projections 2 x 64 wide, capacity 128."""
    import dataclasses

    from ttscli.backends.coreml.convert import export_code_decoder
    from ttscli.backends.coreml.weights import RandomWeights
    from ttscli.config import read_json
    from ttscli.lm.config import stack_shapes
    from ttscli.models.breeze_tts.config import ModelArgs
    from ttscli.models.breeze_tts.coreml_export import backbone_weights

    a = ModelArgs.from_dict(read_json(TINY / "config.json"), source="tiny")
    a = dataclasses.replace(a, backbone_config={**a.backbone_config, "num_attention_heads": 2,
                                                "num_key_value_heads": 2, "head_dim": 64})
    args = a.backbone
    shapes = {"backbone_model." + k: v for k, v in stack_shapes(args).items()}
    shapes["lm_head.weight"] = (a.vocab_size + 1, a.hidden_size)
    width = args.num_key_value_heads * args.head_dim
    m = export_code_decoder(backbone_weights(RandomWeights(shapes), a), tmp_path, "b.mlpackage", model_id=MODEL_ID,
                            family="breeze_tts", source={}, capacity=width, weights_8bit=True)
    assert m["components"]["code_decoder"]["capacity"] == width == 128


def test_quantized_mlx_checkpoint_refused(tmp_path):
    from ttscli.models.breeze_tts.coreml_export import export_coreml

    ck = tmp_path / "ck"
    shutil.copytree(TINY, ck, ignore=shutil.ignore_patterns("audio_tokenizer"))
    cfg = json.loads((ck / "config.json").read_text())
    cfg["quantization"] = {"bits": 8, "group_size": 64}
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="MLX-quantized"):
        export_coreml(ck, tmp_path / "out", model_id=MODEL_ID, capacity=16)
    (ck / "model-00002-of-00002.safetensors").unlink()
    cfg.pop("quantization")
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors is missing"):
        export_coreml(ck, tmp_path / "out", model_id=MODEL_ID, capacity=16)


# ------------------------------------------------------------------ numbers (the package's MIL program)
def test_prefill_every_mode_matches_upstream(package, loaded, goldens):
    model, tok = loaded
    arrays, meta = goldens
    dec = interpreted(package)
    V = model.args.vocab_size
    for name in CASES:
        case = meta["cases"][name]
        cond, uncond, _ = prompts_for(model, tok, goldens, case)
        got = {"cond": cond, "uncond": uncond} if case["cfg_scale"] != 0.0 else {"cond": None, "uncond": cond}
        for br in case["branches"]:
            if got[br] is None:
                continue
            logits, hidden = dec.prefill(got[br].embeds, dec.new_cache())
            assert cos(hidden[0], arrays[f"{name}.{br}.prefill_hidden"]) >= 0.9999, (name, br)
            assert cos(logits[0, :V], arrays[f"{name}.{br}.prefill_logits"][:V]) >= 0.9999, (name, br)
            want, _ = model(got[br].embeds, model.new_cache())
            assert cos(logits, want) >= 0.9999, (name, br)     # the EOS class too


@pytest.mark.parametrize("name", ["plain", "design_cfg", "direction_cfg"])
def test_greedy_frames_equal_upstream(package, loaded, goldens, name):
    model, tok = loaded
    arrays, meta = goldens
    codes, trace = greedy(model, tok, goldens, meta["cases"][name], RowwiseDecoder(interpreted(package)),
                          meta["frames"])
    ref = arrays[f"{name}.codes"]
    assert codes.shape == ref.shape == (20, 16)
    assert (codes == ref).all(), f"{name}: {int((codes == ref).all(axis=1).sum())}/20 frames equal"
    V = model.args.vocab_size
    for t, (bl, _) in enumerate(trace):
        assert cos(np.array(bl[0, :V]), arrays[f"{name}.backbone_logits"][t][:V]) >= 0.9999, (name, t)


def test_capacity_is_an_error_not_a_cut(package, loaded, goldens):
    model, tok = loaded
    _, meta = goldens
    dec = RowwiseDecoder(interpreted(package))
    cond, _, _ = prompts_for(model, tok, goldens, meta["cases"]["direction"])
    room = CAPACITY - cond.embeds.shape[1]
    with pytest.raises(GenerationError, match=f"holds {CAPACITY} positions.*--capacity"):
        greedy(model, tok, goldens, meta["cases"]["direction"], dec, room + 5)


# ------------------------------------------------------------------ finding the conversion; refusals
def test_conversion_found_by_source_hashes_else_refused(package, tmp_path, monkeypatch):
    from ttscli.paths import converted_dir

    folder, _ = package
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    with pytest.raises(CheckpointError, match=r"no Core ML code_decoder converted from .*ttscli convert MODEL"):
        for_checkpoint(TINY, "code_decoder")
    target = converted_dir(MODEL_ID, "coreml")
    shutil.copytree(folder, target)
    assert for_checkpoint(TINY, "code_decoder")[0] == target
    stale = tmp_path / "stale"
    shutil.copytree(TINY, stale, ignore=shutil.ignore_patterns("audio_tokenizer"))
    with open(stale / "model-00001-of-00002.safetensors", "ab") as f:
        f.write(b"\0")
    with pytest.raises(CheckpointError, match="no Core ML code_decoder converted from"):
        for_checkpoint(stale, "code_decoder")
    shutil.rmtree(target / "backbone.mlpackage")       # a manifest whose package is gone
    with pytest.raises(CheckpointError, match="backbone.mlpackage is missing; convert again"):
        read_manifest(target)
    with pytest.raises(CheckpointError, match="no Core ML code_decoder converted from"):
        for_checkpoint(TINY, "code_decoder")


def test_pipeline_loads_the_converted_backbone(package, goldens, tmp_path, monkeypatch):
    """load_pipeline with --code-decoder-backend coreml: the conversion found in the cache by its
    hashes, CFG's branches each in its own state, greedy frames and the EOS class as upstream.
    Off macOS the runtime is stood in for by the package's own MIL program (fp16 as on device)."""
    import ttscli.backends.coreml.decoder as cm_decoder
    import ttscli.backends.coreml.runtime as cm_runtime
    from ttscli.generate import Request
    from ttscli.models.base import LoadOptions
    from ttscli.models.breeze_tts.load import load_pipeline
    from ttscli.paths import converted_dir

    arrays, meta = goldens
    if not _ok:
        monkeypatch.setattr(cm_runtime, "require_coreml", lambda: None)    # the loader's require_converted
        monkeypatch.setattr(cm_decoder, "require_coreml", lambda: None)
        monkeypatch.setattr(cm_decoder, "CoreMLModel",
                            lambda folder, entry, units: InterpretedModel(Path(folder) / entry["path"], fp16=True))
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))

    class Spec:
        id, sample_rate, defaults = MODEL_ID, 24000, {}

    with pytest.raises(CheckpointError, match="no Core ML code_decoder converted from"):
        load_pipeline(Spec(), TINY, LoadOptions(backends={"code_decoder": "coreml"}))
    shutil.copytree(package[0], converted_dir(MODEL_ID, "coreml"))
    pipe = load_pipeline(Spec(), TINY, LoadOptions(backends={"code_decoder": "coreml"}))
    assert pipe.backends["code_decoder"] == "coreml" and isinstance(pipe.code_decoder, RowwiseDecoder)
    req = meta["request"]
    r = Request(text=req["text"], instruct=req["instruction"], max_frames=meta["frames"], ignore_eos=True,
                knobs={"cfg_scale": 3.0, "do_sample": False})
    codes = np.stack(list(pipe.frames(r)))
    assert (codes == arrays["design_cfg.codes"]).all(), \
        f"{int((codes == arrays['design_cfg.codes']).all(axis=1).sum())}/20 frames equal"
    codes = np.stack(list(pipe.frames(Request(text=req["text"], max_frames=40, knobs={"do_sample": False}))))
    assert codes.shape[0] == meta["eos_frames"] and (codes == arrays["eos.codes"]).all()


def _errors(err: str) -> list[str]:
    assert "Traceback" not in err
    text = err.split("them.", 1)[-1] if "non-commercial" in err else err
    return [ln for ln in text.strip().splitlines() if ln.strip()]


@pytest.mark.slow
def test_cli_convert_into_the_cache_and_speak_refusals(run_cli, tmp_path, monkeypatch):
    cache = tmp_path / "own-cache"
    env = {"TTSCLI_CACHE": str(cache)}
    speak = ("speak", "-m", MODEL_ID, "--model-dir", TINY, "--code-decoder-backend", "coreml", "--no-do-sample",
             "--max-frames", "8", "hi", "-o", "a.wav")
    p = run_cli(*speak, env=env)
    assert p.returncode != 0 and not (tmp_path / "a.wav").exists()
    lines = _errors(p.err)
    assert len(lines) == 1, p.err
    assert ("no Core ML code_decoder converted from" in lines[0]) if _ok else ("Core ML needs macOS 15+" in lines[0])

    p = run_cli("convert", MODEL_ID, "--to", "coreml", "--model-dir", TINY, "--capacity", "64", env=env, timeout=600)
    assert p.returncode == 0, p.err
    from ttscli.paths import converted_dir

    monkeypatch.setenv("TTSCLI_CACHE", str(cache))
    m = read_manifest(converted_dir(MODEL_ID, "coreml"))
    assert m["components"]["code_decoder"]["capacity"] == 64 and built_from(m, TINY)
    p = run_cli("models", "--json", env=env)
    row = {r["id"]: r for r in json.loads(p.stdout)}[MODEL_ID]
    assert row["coreml_converted"] == ["code_decoder"]
    # converting again without --force is refused, the cached conversion untouched
    p = run_cli("convert", MODEL_ID, "--to", "coreml", "--model-dir", TINY, env=env)
    assert p.returncode != 0 and "--force" in _errors(p.err)[-1]
    p = run_cli("convert", MODEL_ID, "--to", "coreml", "-q", "--q-bits", "4", "--model-dir", TINY, "-o", "x",
                env=env)
    assert p.returncode != 0 and "8 bits only" in _errors(p.err)[-1] and not (tmp_path / "x").exists()
    if not _ok:
        p = run_cli(*speak, env=env)
        assert p.returncode != 0 and "Core ML needs macOS 15+" in _errors(p.err)[0]


# ------------------------------------------------------------------ the real runtime (macOS 15+)
@pytest.mark.macos
@pytest.mark.skipif(not _ok, reason=_why or "Core ML unavailable")
@pytest.mark.parametrize("name", ["plain", "design_cfg", "direction_cfg"])
def test_on_device_greedy_frames_and_logits(package, loaded, goldens, name):
    model, tok = loaded
    arrays, meta = goldens
    folder, manifest = package
    dec = CoreMLCodeDecoder.open(folder, compute_units="cpu_only", manifest=manifest)
    case = meta["cases"][name]
    cond, _, _ = prompts_for(model, tok, goldens, case)
    logits, _ = dec.prefill(cond.embeds, dec.new_cache())
    want, _ = model(cond.embeds, model.new_cache())
    assert cos(logits, want) >= 0.9999
    codes, _ = greedy(model, tok, goldens, case, RowwiseDecoder(dec), meta["frames"])
    assert (codes == arrays[f"{name}.codes"]).all(), \
        f"{name}: {int((codes == arrays[f'{name}.codes']).all(axis=1).sum())}/20 frames equal"


@pytest.mark.macos
@pytest.mark.skipif(not _ok, reason=_why or "Core ML unavailable")
def test_on_device_pipeline_through_the_cache(package, tmp_path, monkeypatch):
    """`--code-decoder-backend coreml` as the engine loads it: the conversion found by its hashes."""
    from ttscli import api
    from ttscli.generate import Request
    from ttscli.models.base import LoadOptions
    from ttscli.paths import converted_dir

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    shutil.copytree(package[0], converted_dir(MODEL_ID, "coreml"))
    pipe = api.load(MODEL_ID, model_dir=TINY, options=LoadOptions(backends={"code_decoder": "coreml"}))
    assert pipe.backends["code_decoder"] == "coreml"
    audio = np.concatenate(list(pipe.generate(Request(text="Hello the world", max_frames=40, seed=0,
                                                      knobs={"do_sample": False}))))
    assert audio.size > 0 and np.isfinite(audio).all()
