"""The manifest is the one record of converted packages: lookups by checkpoint and by model id."""
import json
import shutil

import pytest
from coreml_common import CHECKPOINT, MODEL_ID

from ttscli.backends.coreml import manifest as mf
from ttscli.errors import CheckpointError


@pytest.fixture
def store(tmp_path, monkeypatch, packages):
    """ttscli's cache with the session's fp16 conversion at the model's converted folder."""
    from ttscli.paths import converted_dir

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    folder = converted_dir(MODEL_ID, "coreml")
    shutil.copytree(packages[0], folder)
    return folder


def test_for_checkpoint_matches_the_source_hash(store, tmp_path):
    folder, m = mf.for_checkpoint(CHECKPOINT, "code_decoder")
    assert folder == store and m["components"]["code_decoder"]["path"] == "talker.mlpackage"
    with pytest.raises(CheckpointError, match="no Core ML speech_decoder converted from"):
        mf.for_checkpoint(CHECKPOINT, "speech_decoder")
    other = tmp_path / "other"
    shutil.copytree(CHECKPOINT, other)
    raw = bytearray((other / "model.safetensors").read_bytes())
    raw[-1] ^= 1                                   # same size, other content: the hash decides
    (other / "model.safetensors").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=r"run `ttscli convert MODEL --model-dir .* --to coreml`"):
        mf.for_checkpoint(other, "code_decoder")


def test_for_model_reads_the_converted_folder(store):
    assert mf.for_model(MODEL_ID)["components"].keys() == {"code_decoder"}
    assert mf.for_model("qwen3-tts-1.7b-base") is None


def test_a_manifest_whose_package_is_gone_is_not_used(store):
    shutil.rmtree(store / "talker.mlpackage")
    with pytest.raises(CheckpointError, match="talker.mlpackage is missing; convert again"):
        mf.read_manifest(store)
    assert mf.for_model(MODEL_ID) is None
    with pytest.raises(CheckpointError, match="no Core ML code_decoder"):
        mf.for_checkpoint(CHECKPOINT, "code_decoder")


def test_other_formats_are_refused(store):
    m = json.loads((store / "manifest.json").read_text())
    m["format_version"] = 1
    (store / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointError, match="is not a ttscli-coreml v2 manifest; convert again"):
        mf.read_manifest(store)
    (store / "manifest.json").write_text("{")
    with pytest.raises(CheckpointError, match="cannot be read"):
        mf.read_manifest(store)


def test_models_inventory_reads_the_manifest(store):
    from ttscli.backends.coreml import coreml_available
    from ttscli.inventory import inventory
    from ttscli.registry import load_registry

    rows = {r["id"]: r for r in inventory(load_registry())}
    assert rows[MODEL_ID]["coreml_converted"] == ["code_decoder"]
    assert rows["qwen3-tts-1.7b-base"]["coreml_converted"] == []
    here = coreml_available()[0]
    assert ("coreml" in rows[MODEL_ID]["backends_usable"]["code_decoder"]) == here
    assert "coreml" not in rows["qwen3-tts-1.7b-base"]["backends_usable"]["code_decoder"]


def test_registry_advertises_what_convert_writes(packages):
    """models.toml's coreml components of every Qwen3-TTS entry = the manifest's components."""
    from ttscli.registry import load_registry

    written = set(packages[1]["components"])
    specs = [s for s in load_registry() if s.family == "qwen3_tts"]
    assert specs
    for spec in specs:
        assert {c for c, names in spec.backends.items() if "coreml" in names} == written, spec.id
