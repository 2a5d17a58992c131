"""`ttscli convert --to coreml`, `ttscli models` and `--code-decoder-backend coreml` as a user runs them."""
import hashlib
import json
import shutil
import sys

import pytest
from clitools import only_line

from ttscli.registry import load_registry

BASE = "qwen3-tts-0.6b-base"
TINY_BASE = "tests/fixtures/qwen3_tts/tiny-base"     # talker checkpoint only: no speech tokenizer


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The brief's own command, once: convert the tiny Base checkpoint to tmp/x."""
    import subprocess
    from pathlib import Path

    from clitools import ttscli_exe

    root = Path(__file__).resolve().parents[2]
    out = tmp_path_factory.mktemp("cli") / "x"
    p = subprocess.run(ttscli_exe() + ["convert", BASE, "--model-dir", str(root / TINY_BASE), "--to", "coreml",
                                       "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return root, out


def test_convert_writes_what_the_manifest_says(converted):
    root, out = converted
    m = json.loads((out / "manifest.json").read_text())
    assert m["model"] == BASE and m["family"] == "qwen3_tts"
    spec = load_registry().resolve(BASE)
    assert set(m["components"]) == {c for c, names in spec.backends.items() if "coreml" in names}
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["manifest.json"] + [e["path"] for e in m["components"].values()])
    raw = (root / TINY_BASE / "model.safetensors").read_bytes()
    assert m["source"]["files"]["model.safetensors"] == {"sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}
    entry = m["components"]["code_decoder"]
    assert entry["capacity"] == 256 and entry["compute_precision"] == "float16"


def test_models_json_shows_the_conversion(converted, run_cli, shared_cache, monkeypatch):
    from ttscli.paths import converted_dir

    _, out = converted
    monkeypatch.setenv("TTSCLI_CACHE", str(shared_cache))      # the cache run_cli gives ttscli
    target = converted_dir(BASE, "coreml")
    shutil.copytree(out, target, dirs_exist_ok=True)
    try:
        p = run_cli("models", "--json")
        assert p.returncode == 0, p.err
        rows = {r["id"]: r for r in json.loads(p.stdout)}
        assert rows[BASE]["coreml_converted"] == ["code_decoder"]
        assert rows["qwen3-tts-1.7b-base"]["coreml_converted"] == []
        if sys.platform != "darwin":
            assert rows[BASE]["backends_usable"]["code_decoder"] == ["mlx", "onnx"]   # Core ML: macOS only
    finally:
        shutil.rmtree(target)


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the answer where Core ML cannot run")
def test_speak_with_coreml_off_macos_is_one_line(run_cli, tmp_path):
    p = run_cli("speak", "hi", "-m", BASE, "--model-dir", "x", "--code-decoder-backend", "coreml",
                "-o", tmp_path / "x.wav")
    assert p.returncode == 1
    assert only_line(p.err).startswith("error: --code-decoder-backend coreml: Core ML needs macOS 15+")
    assert not (tmp_path / "x.wav").exists()
