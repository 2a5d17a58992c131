"""What the exported packages declare: inputs, outputs, states, deployment target, manifest."""
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from coreml_common import CAPACITY, CHECKPOINT, MODEL_ID

import coremltools as ct

import ttscli
from ttscli.backends.coreml.export import describe_spec
from ttscli.lm.config import stack_shapes
from ttscli.backends.coreml.manifest import read_manifest
from ttscli.backends.coreml.weights import RandomWeights, SafeTensors
from ttscli.errors import CheckpointError
from ttscli.models.qwen3_tts.coreml_export import export_coreml, talker_args

CFG = json.loads((CHECKPOINT / "config.json").read_text())
TC = CFG["talker_config"]


def feature(name, shape, dtype):
    return {"name": name, "shape": list(shape), "dtype": dtype}


def test_talker_package_declares_one_position_step_with_kv_state(packages):
    folder, manifest = packages
    spec = ct.utils.load_spec(str(folder / "talker.mlpackage"))
    assert spec.specificationVersion >= 9          # Core ML 8 = iOS 18 / macOS 15: states
    d = describe_spec(spec)
    h, kv, hd, layers = TC["hidden_size"], TC["num_key_value_heads"], TC["head_dim"], TC["num_hidden_layers"]
    assert d["inputs"] == [feature("inputs_embeds", (1, 1, h), "float32"), feature("position", (1,), "int32")]
    assert d["outputs"] == [feature("logits", (1, TC["vocab_size"]), "float32"), feature("hidden", (1, h), "float32")]
    cache = (layers, kv, CAPACITY, hd)
    assert d["states"] == [feature("key_cache", cache, "float16"), feature("value_cache", cache, "float16")]
    entry = manifest["components"]["code_decoder"]
    assert entry["path"] == "talker.mlpackage" and entry["kind"] == "stateful_lm_step"
    assert {k: entry[k] for k in ("inputs", "outputs", "states")} == d
    assert entry["capacity"] == CAPACITY and entry["cache_shape"] == list(cache)
    assert entry["compute_precision"] == "float16" and entry["weights"] == "float16"
    assert entry["lm"]["qk_norm"] and entry["lm"]["rope"]["type"] == "mrope"


def test_manifest_lists_only_what_was_written(packages):
    """One component (the talker as code decoder): the folder holds its package and nothing else."""
    folder, manifest = packages
    assert read_manifest(folder) == manifest
    assert list(manifest["components"]) == ["code_decoder"]
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "talker.mlpackage"]
    assert manifest["model"] == MODEL_ID and manifest["family"] == "qwen3_tts"
    assert manifest["ttscli_version"] == ttscli.__version__
    assert manifest["coremltools_version"] == ct.__version__
    assert manifest["minimum_deployment_target"] == "macOS15"
    src = manifest["source"]["files"]["model.safetensors"]
    raw = (CHECKPOINT / "model.safetensors").read_bytes()
    assert src == {"sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}
    assert manifest["source"]["tts_model_type"] == "custom_voice"
    entry = manifest["components"]["code_decoder"]
    path = folder / entry["path"]
    assert entry["size_bytes"] == sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_8bit_weights_are_int8_and_smaller(packages, packages_8bit):
    from mil_interp import load_package_program

    (_, m16), (f8, m8) = packages, packages_8bit
    e16, e8 = m16["components"]["code_decoder"], m8["components"]["code_decoder"]
    assert e8["weights"] == "int8-linear-symmetric-per-channel"
    assert e8["size_bytes"] < 0.75 * e16["size_bytes"]
    ops = [op for op in load_package_program(f8 / "talker.mlpackage").functions["main"].operations
           if op.op_type == "constexpr_blockwise_shift_scale"]
    assert ops and all(op.data.val.dtype == np.int8 for op in ops)


def test_graph_weights_are_the_checkpoint_tensors(packages):
    """The head const feeding `logits` is talker.codec_head.weight (bf16 on disk) in fp16."""
    from mil_interp import load_package_program

    folder, _ = packages
    fn = load_package_program(folder / "talker.mlpackage").functions["main"]
    linear = [op for op in fn.operations if op.op_type == "linear" and op.outputs[0].name.startswith("logits")]
    assert len(linear) == 1
    want = SafeTensors(CHECKPOINT / "model.safetensors").get("talker.codec_head.weight")
    np.testing.assert_array_equal(linear[0].weight.val, want.astype(np.float16))


def _rewrite_header(src: Path, dst: Path, edit):
    raw = src.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    edit(header)
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    dst.write_bytes(len(hb).to_bytes(8, "little") + hb + raw[8 + n:])


@pytest.mark.parametrize("change, expect", [
    (lambda h: h.pop("talker.model.layers.1.mlp.up_proj.weight"),
     "missing 1: talker.model.layers.1.mlp.up_proj.weight"),
    (lambda h: h["talker.model.layers.0.self_attn.q_norm.weight"].update(shape=[8, 2]),
     "mis-shaped 1: talker.model.layers.0.self_attn.q_norm.weight [8, 2] (expected [16])"),
    (lambda h: h.pop("talker.codec_head.weight"), "missing 1: talker.codec_head.weight"),
])
def test_bad_checkpoint_tensors_are_named_and_nothing_is_written(tmp_path, change, expect):
    ck = tmp_path / "ck"
    shutil.copytree(CHECKPOINT, ck)
    _rewrite_header(CHECKPOINT / "model.safetensors", ck / "model.safetensors", change)
    with pytest.raises(CheckpointError, match=expect.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        export_coreml(ck, tmp_path / "out", model_id=MODEL_ID, capacity=CAPACITY)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_missing_checkpoint_file_is_a_checkpoint_error(tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(CHECKPOINT, ck)
    (ck / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        export_coreml(ck, tmp_path / "out", model_id=MODEL_ID)


def test_the_released_talker_dimensions():
    """LMArgs of the published 0.6B/1.7B talker configs, and the tensors the export reads."""
    from ttscli.models.qwen3_tts.config import preset_config

    for preset, h in (("0.6B-Base", 1024), ("1.7B-Base", 2048)):
        args = talker_args(preset_config(preset))
        shapes = stack_shapes(args)
        assert args.qk_norm and args.rope.type == "mrope" and args.num_hidden_layers == 28
        assert shapes["layers.27.self_attn.q_proj.weight"] == (2048, h)
        assert shapes["layers.0.self_attn.k_norm.weight"] == (128,)
        assert not any(k.endswith(".bias") for k in shapes)
        w = RandomWeights(shapes)
        assert w.get("layers.0.mlp.down_proj.weight").shape == (h, args.intermediate_size)
