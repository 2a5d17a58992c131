"""`ttscli convert --to mlx` round trips: dtype casts and 8/4-bit quantization, read back by the loader."""
import json
import os
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clitools import only_line

from e2e_fixture import FIX, build

CV = "qwen3-tts-1.7b-customvoice"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return build("customvoice", tmp_path_factory.mktemp("qconv") / "cv", eos_gain=3.0)


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def prefill_logits(folder):
    from ttscli.models.qwen3_tts.load import load_model
    from ttscli.lm import MLXCodeDecoder

    model, _ = load_model(folder, "float32")
    g = np.load(FIX / "tiny-customvoice.goldens.npz")
    emb = mx.array(g["prefill/embeds"])[None]
    logits, _ = MLXCodeDecoder(model.talker).prefill(emb, model.talker.new_cache())
    return np.array(logits[0]), model


def test_8bit_and_4bit_round_trip(run_cli, tmp_path, ckpt):
    ref, _ = prefill_logits(ckpt)
    sizes = {}
    for name, args in {"bf16": [], "q8": ["-q", "--q-bits", "8"], "q4": ["-q", "--q-bits", "4"]}.items():
        out = tmp_path / name
        p = run_cli("convert", CV, "--model-dir", ckpt, "--to", "mlx", "--dtype", "bfloat16", "--q-group-size", "32",
                    *args, "-o", out)
        assert p.returncode == 0, p.err
        sizes[name] = os.path.getsize(out / "model.safetensors")
        cfg = json.loads((out / "config.json").read_text())
        logits, model = prefill_logits(out)
        if name == "bf16":
            assert "quantization" not in cfg
            assert cosine(logits, ref) > 0.9999
            continue
        assert cfg["quantization"] == {"group_size": 32, "bits": int(name[1])}
        # quality-critical tensors stay unquantized
        assert model.talker.codec_head.weight.dtype != mx.uint32
        assert model.talker.model.layers[0].mlp.gate_proj.weight.dtype == mx.uint32
        c = cosine(logits, ref)
        print(f"{name}: logits cosine vs float32 {c:.6f}; size {sizes[name]} B vs bf16 {sizes['bf16']} B")
        assert c >= (0.999 if name == "q8" else 0.98)
        # the quantized model generates through the CLI
        s = run_cli("speak", "Hello there.", "-m", CV, "--model-dir", out, "--voice", "ryan", "--seed", "1",
                    "-o", f"{name}.wav")
        assert s.returncode == 0, s.err
        assert sf.info(str(tmp_path / f"{name}.wav")).frames > 0
    assert sizes["q4"] < sizes["q8"] < sizes["bf16"]


def test_convert_refuses_to_overwrite_and_force(run_cli, tmp_path, ckpt):
    out = tmp_path / "o"
    out.mkdir()
    p = run_cli("convert", CV, "--model-dir", ckpt, "--to", "mlx", "-o", out)
    assert p.returncode == 2 and "--force" in only_line(p.err)
    p = run_cli("convert", CV, "--model-dir", ckpt, "--to", "mlx", "-o", out, "--force")
    assert p.returncode == 0, p.err
    assert (out / "model.safetensors").exists() and (out / "speech_tokenizer" / "model.safetensors").exists()
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".o.")]  # no temp folder left


def test_reconverting_a_quantized_checkpoint_is_refused(run_cli, tmp_path, ckpt):
    q = tmp_path / "q"
    assert run_cli("convert", CV, "--model-dir", ckpt, "--to", "mlx", "-q", "--q-bits", "8", "--q-group-size", "32",
                   "-o", q).returncode == 0
    p = run_cli("convert", CV, "--model-dir", q, "--to", "mlx", "-o", tmp_path / "again")
    assert p.returncode == 2 and "already quantized" in only_line(p.err)
    assert not (tmp_path / "again").exists()


def test_convert_to_coreml_through_the_cli(run_cli, tmp_path, ckpt):
    out = tmp_path / "cml"
    p = run_cli("convert", CV, "--model-dir", ckpt, "--to", "coreml", "--capacity", "64", "-o", out)
    assert p.returncode == 0, p.err
    manifest = json.loads((out / "manifest.json").read_text())
    assert (out / "talker.mlpackage").is_dir() or any(x.suffix == ".mlpackage" for x in out.iterdir())
    assert "talker" in json.dumps(manifest) and "64" in json.dumps(manifest)
    bad = run_cli("convert", CV, "--model-dir", ckpt, "--to", "coreml", "--dtype", "float32", "-o", tmp_path / "x")
    assert bad.returncode == 2 and "float16" in only_line(bad.err)
