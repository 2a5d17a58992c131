"""What the exported packages declare: inputs, outputs, states, deployment target, manifest."""
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from coreml_common import CAPACITY, CHECKPOINT, DECODER_FRAMES, STREAM_FRAMES

import coremltools as ct

import ttscli
from ttscli.errors import CheckpointError
from ttscli.models.qwen3_tts.coreml_export import (
    REAL_TOKENIZER_CONFIG, SafeTensors, describe_spec, export_coreml, random_sources, read_manifest)

CFG = json.loads((CHECKPOINT / "config.json").read_text())
TC = CFG["talker_config"]
CC = TC["code_predictor_config"]


def feature(name, shape, dtype):
    return {"name": name, "shape": list(shape), "dtype": dtype}


def spec_of(folder: Path, name: str):
    return ct.utils.load_spec(str(folder / f"{name}.mlpackage"))


def test_talker_package_declares_one_position_step_with_kv_state(packages):
    folder, manifest = packages
    spec = spec_of(folder, "talker")
    assert spec.specificationVersion >= 9          # Core ML 8 = iOS 18 / macOS 15: states
    d = describe_spec(spec)
    h, kv, hd, layers = TC["hidden_size"], TC["num_key_value_heads"], TC["head_dim"], TC["num_hidden_layers"]
    assert d["inputs"] == [feature("inputs_embeds", (1, 1, h), "float32"), feature("position", (1,), "int32")]
    assert d["outputs"] == [feature("logits", (1, TC["vocab_size"]), "float32"), feature("hidden", (1, h), "float32")]
    cache = (layers, kv, CAPACITY, hd)
    assert d["states"] == [feature("key_cache", cache, "float16"), feature("value_cache", cache, "float16")]
    entry = manifest["packages"]["talker"]
    assert {k: entry[k] for k in ("inputs", "outputs", "states")} == d
    assert entry["capacity"] == CAPACITY and entry["cache_shape"] == list(cache)
    assert entry["compute_precision"] == "float16" and entry["weights"] == "float16"


def test_code_predictor_package_has_16_slots_and_a_head_selector(packages):
    folder, manifest = packages
    d = describe_spec(spec_of(folder, "code_predictor"))
    assert d["inputs"] == [feature("inputs_embeds", (1, 1, TC["hidden_size"]), "float32"),
                           feature("position", (1,), "int32"), feature("head", (1,), "int32")]
    assert d["outputs"] == [feature("logits", (1, CC["vocab_size"]), "float32"),
                            feature("hidden", (1, CC["hidden_size"]), "float32")]
    cache = (CC["num_hidden_layers"], CC["num_key_value_heads"], CC["num_code_groups"], CC["head_dim"])
    assert [s["shape"] for s in d["states"]] == [list(cache)] * 2
    entry = manifest["packages"]["code_predictor"]
    assert entry["num_heads"] == 15 and entry["capacity"] == 16 and entry["input_size"] == TC["hidden_size"]


def test_speech_decoder_package_is_a_fixed_window(packages):
    folder, manifest = packages
    d = describe_spec(spec_of(folder, "speech_decoder"))
    assert d == {"inputs": [feature("codes", (1, 16, DECODER_FRAMES), "int32")],
                 "outputs": [feature("audio", (1, DECODER_FRAMES * 1920), "float32")], "states": []}
    entry = manifest["packages"]["speech_decoder"]
    assert entry["kind"] == "fixed_window" and entry["samples_per_frame"] == 1920 and entry["sample_rate"] == 24000


def test_stream_decoder_package_carries_every_layer_in_state(packages):
    folder, manifest = packages
    d = describe_spec(spec_of(folder, "speech_decoder_stream"))
    assert d["inputs"] == [feature("codes", (1, 16, STREAM_FRAMES), "int32"), feature("frames_seen", (1,), "int32")]
    assert d["outputs"] == [feature("audio", (1, STREAM_FRAMES * 1920), "float32")]
    dc = json.loads((CHECKPOINT / "speech_tokenizer" / "config.json").read_text())["decoder_config"]
    states = {s["name"]: s for s in d["states"]}
    kv = (dc["num_hidden_layers"], dc["num_attention_heads"], dc["sliding_window"], dc["head_dim"])
    assert states["key_window"] == feature("key_window", kv, "float16")
    # pre_conv, 2 ConvNeXt dwconvs, decoder.0, per block a transposed-conv tail + 3 dilated convs, final conv
    assert len(states) == 2 + 1 + 2 + 1 + 4 * 4 + 1
    assert all(s["dtype"] == "float16" for s in d["states"])
    assert states["conv_decoder_4_block_4_conv1_conv"]["shape"] == [1, dc["decoder_dim"] // 16, 6 * 9]
    assert states["tail_decoder_1_block_1_conv"]["shape"] == [1, dc["decoder_dim"] // 2, 8]
    assert manifest["packages"]["speech_decoder_stream"]["kind"] == "stateful_stream"


def test_manifest_names_sources_versions_and_sizes(packages):
    folder, manifest = packages
    assert read_manifest(folder) == manifest
    assert manifest["ttscli_version"] == ttscli.__version__
    assert manifest["coremltools_version"] == ct.__version__
    assert manifest["minimum_deployment_target"] == "macOS15"
    for rel in ("model.safetensors", "speech_tokenizer/model.safetensors"):
        assert manifest["source"]["sha256"][rel] == hashlib.sha256((CHECKPOINT / rel).read_bytes()).hexdigest()
    assert manifest["source"]["tts_model_type"] == "custom_voice"
    for name, entry in manifest["packages"].items():
        path = folder / entry["path"]
        assert path.is_dir() and entry["size_bytes"] == sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def test_8bit_weights_are_int8_and_smaller(packages, packages_8bit):
    from mil_interp import load_package_program

    (_, m16), (f8, m8) = packages, packages_8bit
    for name in ("talker", "code_predictor"):
        assert m8["packages"][name]["weights"] == "int8-linear-symmetric-per-channel"
        assert m8["packages"][name]["size_bytes"] < 0.75 * m16["packages"][name]["size_bytes"]
        ops = [op for op in load_package_program(f8 / f"{name}.mlpackage").functions["main"].operations
               if op.op_type == "constexpr_blockwise_shift_scale"]
        assert ops and all(op.data.val.dtype == np.int8 for op in ops)
    assert "speech_decoder" not in m8["packages"]


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
    (lambda h: h.pop("talker.model.layers.1.mlp.up_proj.weight"), "missing tensors talker.model.layers.1.mlp.up_proj.weight"),
    (lambda h: h["talker.model.layers.0.self_attn.q_norm.weight"].update(shape=[8, 2]),
     "talker.model.layers.0.self_attn.q_norm.weight (8, 2) (expected (16,))"),
])
def test_bad_checkpoint_tensors_are_named(tmp_path, change, expect):
    ck = tmp_path / "ck"
    shutil.copytree(CHECKPOINT, ck)
    _rewrite_header(CHECKPOINT / "model.safetensors", ck / "model.safetensors", change)
    with pytest.raises(CheckpointError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        export_coreml(ck, tmp_path / "out", capacity=CAPACITY, components=("talker",))


def test_missing_checkpoint_file_is_a_checkpoint_error(tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(CHECKPOINT, ck)
    (ck / "speech_tokenizer" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="speech_tokenizer/model.safetensors is missing"):
        export_coreml(ck, tmp_path / "out", components=("speech_decoder",))


def test_random_sources_have_the_published_real_shapes():
    from ttscli.models.qwen3_tts.config import preset_config

    model, tok = random_sources(preset_config("0.6B-Base"), REAL_TOKENIZER_CONFIG)
    assert model.shape("talker.model.layers.27.self_attn.q_proj.weight") == (2048, 1024)
    assert model.shape("talker.codec_head.weight") == (3072, 1024)
    assert model.shape("talker.code_predictor.lm_head.14.weight") == (2048, 1024)
    assert "talker.code_predictor.small_to_mtp_projection.weight" not in model
    assert tok.shape("decoder.decoder.1.block.1.conv.weight") == (1536, 768, 16)
    assert tok.shape("decoder.quantizer.rvq_rest.vq.layers.14._codebook.embedding_sum") == (2048, 256)
    big, _ = random_sources(preset_config("1.7B-Base"), REAL_TOKENIZER_CONFIG)
    assert big.shape("talker.code_predictor.small_to_mtp_projection.weight") == (1024, 2048)
