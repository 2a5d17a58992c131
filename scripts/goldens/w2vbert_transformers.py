"""A tiny w2v-BERT 2.0 checkpoint and its goldens, computed by transformers' own classes.

IndexTTS2 (and MaskGCT before it) takes its semantic features from ``facebook/w2v-bert-2.0``:
transformers' ``SeamlessM4TFeatureExtractor`` turns 16 kHz audio into stacked Kaldi fbanks,
``Wav2Vec2BertModel`` runs its Conformer stack, and ``hidden_states[17]`` is normalised with
``wav2vec2bert_stats.pt``. This script builds the same classes at a tiny size and records what
they compute. Run it from the repository root with the reference venv (scripts/goldens/README.md):

    REFVENV/bin/python scripts/goldens/w2vbert_transformers.py

It writes tests/fixtures/w2vbert/:

- ``tiny/``: ``Wav2Vec2BertModel.save_pretrained`` of a ``Wav2Vec2BertConfig`` that keeps every
  architecture option of the published model (transformers' defaults are that model's:
  ``relative_key`` attention with a clamped distance table, macaron feed-forwards with swish,
  the causal depthwise conv module, ``masked_spec_embed`` present because ``mask_time_prob`` >
  0, no adapter) at width 32, 2 heads, feed-forward 64, 4 layers, depthwise kernel 5 and a
  distance window of 16 left / 4 right (shorter than the test signal, so the clamp is reached).
  Every tensor is re-initialised from a fixed seed, norms and biases included, so none is
  trivially 1 or 0. Next to it ``preprocessor_config.json``: the feature extractor as the
  published folder configures it (transformers' converter saves it with ``padding_value=1``).
- ``wav2vec2bert_stats.pt``: ``{"mean": [32], "var": [32]}`` in the layout of IndexTTS2's
  ``wav2vec2bert_stats.pt`` (``torch.save`` of a dict of tensors).
- ``goldens.npz``:
  ``wav`` (1.31 s of a chirp, a tone and noise at 16 kHz: 129 fbank frames, an odd count, so the
  extractor pads one frame and the last stacked frame is masked), its ``input_features`` [T, 160]
  and ``attention_mask`` [T]; ``hidden_states`` [5, T, 32] (``output_hidden_states=True``: the
  projected input, then each layer's output) and ``last_hidden_state`` [T, 32], from the model
  called with that mask as IndexTTS2's ``get_emb`` calls it; ``normalised`` [T, 32]: hidden state
  ``norm_layer`` (3, standing in for 17) as ``(h - mean) / sqrt(var)``;
  ``wav_even`` (1.0 s: an even frame count, nothing masked) with ``input_features_even`` and
  ``attention_mask_even``; ``hidden_states_even`` [5, T', 32] for it.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "w2vbert"
SR = 16000
NORM_LAYER = 3
SEED = 1234

TINY = dict(
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=2,
    intermediate_size=64,
    conv_depthwise_kernel_size=5,
    left_max_position_embeddings=16,
    right_max_position_embeddings=4,
    apply_spec_augment=False,   # as the published config (the converter sets it); the mask embed stays
)


def test_signal(seconds: float, seed: int) -> np.ndarray:
    """A chirp (80 Hz -> 4 kHz), a 220 Hz tone with a slow tremolo, and white noise, peak ~0.6."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * SR))
    t = np.arange(n) / SR
    f0, f1 = 80.0, 4000.0
    chirp = np.sin(2 * np.pi * (f0 * t + 0.5 * (f1 - f0) / seconds * t * t))
    tone = np.sin(2 * np.pi * 220.0 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3.0 * t))
    x = 0.3 * chirp + 0.2 * tone + 0.03 * rng.standard_normal(n)
    return x.astype(np.float32)


def reinit(model: torch.nn.Module, seed: int) -> None:
    """Every tensor from one seeded generator: matrices N(0, 1/fan_in), norm scales 1 + N(0, 0.1^2),
    biases N(0, 0.05^2), the distance table N(0, 0.5^2) (a visible positional term)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            shape = p.shape
            if name.endswith("distance_embedding.weight"):
                p.copy_(0.5 * torch.randn(shape, generator=g))
            elif p.ndim >= 2:
                fan_in = math.prod(shape[1:])
                p.copy_(torch.randn(shape, generator=g) / math.sqrt(fan_in))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(shape, generator=g))
            elif "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(shape, generator=g))
            else:                   # masked_spec_embed
                p.copy_(torch.rand(shape, generator=g))


def main() -> None:
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel

    torch.manual_seed(SEED)
    config = Wav2Vec2BertConfig(**TINY)
    model = Wav2Vec2BertModel(config).eval()
    reinit(model, SEED)

    tiny = OUT / "tiny"
    tiny.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tiny, safe_serialization=True)
    extractor = SeamlessM4TFeatureExtractor(padding_value=1)
    extractor.save_pretrained(tiny)
    # read back what was written, as IndexTTS2 loads it
    extractor = SeamlessM4TFeatureExtractor.from_pretrained(tiny)
    model = Wav2Vec2BertModel.from_pretrained(tiny).eval()

    g = torch.Generator().manual_seed(SEED + 1)
    mean = 0.5 * torch.randn(config.hidden_size, generator=g)
    var = 0.5 + torch.rand(config.hidden_size, generator=g)
    torch.save({"mean": mean, "var": var}, OUT / "wav2vec2bert_stats.pt")

    out: dict[str, np.ndarray] = {}

    def run(wav: np.ndarray, suffix: str) -> None:
        inputs = extractor(wav, sampling_rate=SR, return_tensors="pt")
        with torch.no_grad():
            res = model(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"],
                        output_hidden_states=True)
        out["wav" + suffix] = wav
        out["input_features" + suffix] = inputs["input_features"][0].numpy().astype(np.float32)
        out["attention_mask" + suffix] = inputs["attention_mask"][0].numpy().astype(np.int32)
        out["hidden_states" + suffix] = torch.stack(res.hidden_states)[:, 0].numpy().astype(np.float32)
        if not suffix:
            out["last_hidden_state"] = res.last_hidden_state[0].numpy().astype(np.float32)
            feat = res.hidden_states[NORM_LAYER]
            out["normalised"] = ((feat - mean) / torch.sqrt(var))[0].numpy().astype(np.float32)
            out["norm_layer"] = np.array(NORM_LAYER, np.int32)

    run(test_signal(1.31, 7), "")
    run(test_signal(1.0, 8), "_even")
    assert out["attention_mask"][-1] == 0 and out["attention_mask_even"].all()
    np.savez_compressed(OUT / "goldens.npz", **out)

    print(json.dumps({k: list(v.shape) for k, v in out.items()}))
    for f in sorted(OUT.rglob("*")):
        if f.is_file():
            print(f.relative_to(ROOT), f.stat().st_size)


if __name__ == "__main__":
    sys.exit(main())
