"""Tiny Qwen3-TTS checkpoint + upstream talker goldens for the Core ML export tests (tests/coreml/).

Rerun (from the repo root, after scripts/reference-venv.sh has built /work/refvenv):

    REFVENV/bin/python scripts/goldens/qwen3_tts_coreml.py

Writes tests/fixtures/coreml/qwen3_tts_tiny/ in the published layout (config.json,
model.safetensors in bf16 with `talker.*` keys) and tests/fixtures/coreml/goldens.npz (the
talker's post-norm hidden states and codec-head logits for 12 positions of random input
embeddings), all from the upstream `qwen_tts` 0.1.1 classes. Only the talker is exported to
Core ML, so there is no speech tokenizer. CustomVoice type, so there is no speaker encoder.
"""
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs

reference_stubs.install()

import numpy as np
import torch
from safetensors.torch import save_file

from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration

OUT = ROOT / "tests" / "fixtures" / "coreml"
CKPT = OUT / "qwen3_tts_tiny"

TALKER = dict(
    vocab_size=3072, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6,
    rope_theta=1000000, rope_scaling={"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default",
                                      "type": "default"},
    attention_bias=False, num_code_groups=16, text_vocab_size=256, text_hidden_size=16,
    codec_eos_token_id=2150, codec_think_id=2154, codec_nothink_id=2155, codec_think_bos_id=2156,
    codec_think_eos_id=2157, codec_pad_id=2148, codec_bos_id=2149,
    codec_language_id={"english": 2050, "chinese": 2055}, spk_id={"ryan": 3061}, spk_is_dialect={"ryan": False},
    code_predictor_config=dict(
        vocab_size=256, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, rope_theta=1000000, rope_scaling=None, max_position_embeddings=65536,
        rms_norm_eps=1e-6, layer_types=["full_attention"] * 2, num_code_groups=16, attention_bias=False,
        hidden_act="silu"),
)


def reinit(module: torch.nn.Module, seed: int):
    """Fan-in-scaled normals for matrices, values near 1 for norms, small biases."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(module.state_dict().items()):
        if not p.is_floating_point():
            continue
        leaf = name.rsplit(".", 1)[-1]
        if p.ndim == 1 and ("norm" in name or "layernorm" in name) and leaf == "weight":
            v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
        elif leaf == "bias":
            v = 0.05 * torch.randn(p.shape, generator=g)
        elif "embedding" in name:
            v = torch.randn(p.shape, generator=g)
        else:
            fan_in = math.prod(p.shape[1:]) if p.ndim > 1 else p.shape[0]
            v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
        p.copy_(v.to(p.dtype))


def main():
    torch.manual_seed(0)
    CKPT.mkdir(parents=True, exist_ok=True)

    cfg = Qwen3TTSConfig(talker_config=TALKER, tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="0b6",
                         tts_model_type="custom_voice")
    model = Qwen3TTSForConditionalGeneration(cfg).float().eval()
    with torch.no_grad():
        reinit(model, 1)
        # Goldens use exactly the bf16 values that are saved.
        for p in model.state_dict().values():
            if p.is_floating_point():
                p.copy_(p.to(torch.bfloat16).float())
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(CKPT / "model.safetensors"), metadata={"format": "pt"})
    (CKPT / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, sort_keys=True) + "\n")

    talker = model.talker
    g = torch.Generator().manual_seed(2)
    n_pos = 12
    with torch.no_grad():
        embeds = torch.randn(1, n_pos, TALKER["hidden_size"], generator=g)
        out = talker.model(inputs_embeds=embeds, use_cache=False)
        hidden = out.last_hidden_state
        logits = talker.codec_head(hidden)

    np.savez_compressed(OUT / "goldens.npz", talker_embeds=embeds[0].numpy(), talker_hidden=hidden[0].numpy(),
                        talker_logits=logits[0].numpy())
    size = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({size / 1e6:.2f} MB); logits std {logits.std():.3f}")


if __name__ == "__main__":
    main()
