"""The w2v-BERT 2.0 part of IndexTTS2's tiny test folder: ``tests/fixtures/indextts2/tiny/w2v-bert-2.0/``.

IndexTTS2 reads ``hidden_states[17]`` of ``facebook/w2v-bert-2.0``, so the end-to-end fixture needs
a model with at least 17 layers; its width is the fixture's feature width (32). transformers'
``Wav2Vec2BertModel.save_pretrained`` of a ``Wav2Vec2BertConfig`` with the published model's
architecture options (transformers' defaults), 17 layers of width 32, feed-forward 32, 2 heads,
depthwise kernel 5, distance window 16 / 4, every tensor re-initialised from a fixed seed; and the
feature extractor's ``preprocessor_config.json`` as the published folder has it. The numbers of
this model are checked by tests/indextts2/test_w2vbert.py's goldens (scripts/goldens/
w2vbert_transformers.py); this folder only lets the pipeline run end to end. Run from the
repository root with the reference venv:

    REFVENV/bin/python scripts/goldens/indextts2_w2vbert_folder.py
"""
from __future__ import annotations

from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "indextts2" / "tiny" / "w2v-bert-2.0"


def main() -> None:
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertConfig, Wav2Vec2BertModel

    cfg = Wav2Vec2BertConfig(hidden_size=32, num_hidden_layers=17, num_attention_heads=2, intermediate_size=32,
                             conv_depthwise_kernel_size=5, left_max_position_embeddings=16,
                             right_max_position_embeddings=4, apply_spec_augment=False)
    torch.manual_seed(0)
    model = Wav2Vec2BertModel(cfg).eval()
    gen = torch.Generator().manual_seed(21)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)
    model.save_pretrained(str(OUT), safe_serialization=True)
    SeamlessM4TFeatureExtractor(padding_value=1.0).save_pretrained(str(OUT))
    print(sum(p.numel() for p in model.parameters()), "parameters")


if __name__ == "__main__":
    main()
