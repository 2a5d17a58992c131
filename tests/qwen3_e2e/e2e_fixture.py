"""A complete tiny Qwen3-TTS checkpoint folder for end-to-end CLI tests.

The root files come from an upstream-built tiny fixture (tests/fixtures/qwen3_tts/tiny-*); the
speech_tokenizer/ folder from the tiny upstream tokenizer fixture (encoder + decoder), with its
decoder codebooks widened to the 2048 codes the talker emits (extra rows are random: fidelity is
tested against goldens elsewhere; this folder only exercises the CLI paths). The EOS row of the
codec head is scaled so sampling ends speech within a few dozen frames.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts"
EOS = 2150


def build(kind: str, out: Path, eos_gain: float = 6.0, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    shutil.copytree(FIX / f"tiny-{kind}", out)
    st = out / "speech_tokenizer"
    st.mkdir()
    src = FIX / "tokenizer_enc"
    cfg = json.loads((src / "config.json").read_text())
    size = 2048
    w = load_file(str(src / "model.safetensors"))
    for k in list(w):
        if k.startswith("decoder.") and k.endswith("_codebook.embedding_sum"):
            old = w[k]
            extra = rng.standard_normal((size - old.shape[0], old.shape[1])).astype(old.dtype) * old.std()
            w[k] = np.concatenate([old, extra])
            usage = k.replace("embedding_sum", "cluster_usage")
            w[usage] = np.concatenate([w[usage], np.ones(size - old.shape[0], w[usage].dtype)])
    cfg["decoder_config"]["codebook_size"] = size
    save_file(w, str(st / "model.safetensors"), metadata={"format": "pt"})
    (st / "config.json").write_text(json.dumps(cfg, indent=2))
    for extra in ("preprocessor_config.json",):
        if (src / extra).exists():
            shutil.copy2(src / extra, st / extra)
    import mlx.core as mx  # the root file is bf16, which numpy cannot hold

    root = mx.load(str(out / "model.safetensors"))
    head = root["talker.codec_head.weight"]
    gain = mx.ones((head.shape[0], 1), head.dtype).at[EOS].multiply(eos_gain)
    root["talker.codec_head.weight"] = head * gain
    mx.save_safetensors(str(out / "model.safetensors"), root, metadata={"format": "pt"})
    return out
