"""RoPE goldens for ttscli.lm from the upstream code: transformers 4.57.3 and qwen-tts 0.1.1.

Rerun (from the repo root; the reference venv of scripts/reference-venv.sh, or any venv with
the CPU torch wheel, transformers==4.57.3 and qwen-tts==0.1.1 importable):

    REFVENV/bin/python scripts/goldens/lm_rope.py

Writes tests/fixtures/lm/rope.npz:

- ``<case>_inv_freq``: inverse frequencies from transformers' own ``_compute_default_rope_parameters``
  / ``_compute_llama3_parameters`` for each case of CASES (default at Qwen3's theta; llama3 at
  Llama 3.x / Chatterbox T3 settings and at a tiny setting whose three wavelength bands all hold
  several pairs); ``<case>_x``, ``<case>_pos``, ``<case>_out``: a random ``[1, heads, L, head_dim]``
  rotated by transformers' ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb`` at positions
  ``pos`` (contiguous, starting past 0, as after a cache prefill).
- ``mrope_<layout>_{x,pos,out}``: the Qwen3-TTS talker's own rotary code
  (``Qwen3TTSTalkerRotaryEmbedding`` + ``apply_multimodal_rotary_pos_emb``, talker config with
  ``mrope_section`` [24, 20, 20]) for interleaved and contiguous sections, with three distinct
  position rows (``pos [3, 1, L]``), and ``..._same_*`` with three equal rows (what TTS feeds).
- ``llama_params`` / ``qwen3_params``: ``name:shape`` of every tensor of transformers'
  ``LlamaModel`` / ``Qwen3Model`` at TINY (the names our DecoderLM must load without renaming).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs  # noqa: F401  (torchaudio extension stub before qwen_tts)
import torch
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSTalkerConfig
from qwen_tts.core.models.modeling_qwen3_tts import (
    Qwen3TTSTalkerRotaryEmbedding,
    apply_multimodal_rotary_pos_emb,
)
from transformers import LlamaConfig, LlamaModel, Qwen3Config, Qwen3Model
from transformers.modeling_rope_utils import (
    _compute_default_rope_parameters,
    _compute_llama3_parameters,
)
from transformers.models.llama.modeling_llama import (
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

OUT = ROOT / "tests" / "fixtures" / "lm" / "rope.npz"

# name: (head_dim, theta, rope_scaling or None)
CASES = {
    "default_qwen3": (128, 1000000.0, None),
    "default_small": (16, 10000.0, None),
    "llama3_t3": (64, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "llama3_32": (128, 500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "llama3_tiny": (32, 10000.0, {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 256}),
}

TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
            num_hidden_layers=2, vocab_size=50)


def llama_config(head_dim: int, theta: float, scaling: dict | None) -> LlamaConfig:
    return LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, num_key_value_heads=2, head_dim=head_dim,
                       rope_theta=theta, rope_scaling=scaling, max_position_embeddings=131072)


def main() -> None:
    g = torch.Generator().manual_seed(0)
    out: dict[str, np.ndarray] = {}
    for name, (head_dim, theta, scaling) in CASES.items():
        cfg = llama_config(head_dim, theta, scaling)
        fn = _compute_llama3_parameters if scaling else _compute_default_rope_parameters
        inv, attn_factor = fn(cfg, "cpu")
        assert attn_factor == 1.0
        out[f"{name}_inv_freq"] = inv.numpy().astype(np.float32)
        # rotate a random input at positions past a prefill, far enough for the scaled bands to matter
        x = torch.randn(1, 2, 7, head_dim, generator=g)
        pos = torch.arange(3000, 3007)[None]
        cos, sin = LlamaRotaryEmbedding(cfg)(x, pos)
        q, _ = apply_rotary_pos_emb(x, x, cos, sin)
        out[f"{name}_x"], out[f"{name}_pos"], out[f"{name}_out"] = x.numpy(), pos.numpy(), q.numpy()

    head_dim, L = 128, 6
    for layout, interleaved in (("interleaved", True), ("contiguous", False)):
        cfg = Qwen3TTSTalkerConfig(hidden_size=256, num_attention_heads=2, num_key_value_heads=2, head_dim=head_dim,
                                   rope_theta=1000000.0, max_position_embeddings=32768,
                                   rope_scaling={"interleaved": interleaved, "mrope_section": [24, 20, 20],
                                                 "rope_type": "default", "type": "default"})
        emb = Qwen3TTSTalkerRotaryEmbedding(cfg)
        x = torch.randn(1, 2, L, head_dim, generator=g)
        rows = {"": torch.stack([torch.arange(40, 40 + L), torch.arange(7, 7 + L) * 3, torch.arange(L) + 1000]),
                "_same": torch.arange(40, 40 + L)[None].expand(3, L)}
        for tag, p in rows.items():
            pos = p[:, None, :]                                     # [3, batch, L]
            cos, sin = emb(x, pos)
            q, _ = apply_multimodal_rotary_pos_emb(x, x, cos, sin, cfg.rope_scaling["mrope_section"], interleaved)
            key = f"mrope_{layout}{tag}"
            out[f"{key}_x"], out[f"{key}_pos"], out[f"{key}_out"] = x.numpy(), pos.numpy(), q.numpy()

    for name, model in (("llama", LlamaModel(LlamaConfig(**TINY))), ("qwen3", Qwen3Model(Qwen3Config(**TINY)))):
        out[f"{name}_params"] = np.array(sorted(f"{k}:{list(v.shape)}" for k, v in model.state_dict().items()))

    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(out)} arrays)")


if __name__ == "__main__":
    with torch.no_grad():
        main()
