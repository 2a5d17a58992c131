"""A tiny IndexTTS2 GPT checkpoint and its goldens, computed by the upstream index-tts code.

Upstream is not a PyPI package: fetch it first (scripts/goldens/indextts2_fetch.sh, which also puts
upstream's pinned transformers 4.52.1 in a side folder), then, from the repository root, with the
reference venv (scripts/goldens/README.md):

    INDEXTTS_SRC=../refsrc/index-tts INDEXTTS_DEPS=../refsrc/index-tts-deps \\
        REFVENV/bin/python scripts/goldens/indextts2_upstream.py

Writes tests/fixtures/indextts2/:

- ``tiny/config.yaml``: upstream's ``checkpoints/config.yaml`` with the ``gpt`` section at tiny
  sizes (width 64, 2 layers, 4 heads, 100 text ids, a 64-code semantic codebook with start / stop
  at 64 / 65, two small Conformer + perceiver conditioners) and ``tiny/gpt.pth``: the
  ``state_dict()`` of upstream's ``UnifiedVoice`` built from that section, saved by
  ``torch.save`` as the published ``gpt.pth`` is, every tensor re-initialised deterministically.
  The w2v-BERT feature width (1024) is hard-coded inside ``UnifiedVoice.__init__`` (the two
  Conformer inputs, the emotion perceiver's width, ``emovec_layer``); here those four modules are
  rebuilt from the same classes with width :data:`FEAT` (``feature_width`` in the yaml), so the
  tensor names are the published ones and only those widths differ.
- ``goldens.npz``: the inputs (``spk_feat`` / ``emo_feat``: normalised w2v-BERT features,
  ``text``: BPE ids), the speaker conditioning latents (``cond_latents``, upstream
  ``get_conditioning``: 32 perceiver latents), the emotion vectors of the speaker and emotion
  references (``emovec_spk``, ``emovec_emo``, ``get_emovec``) and their blend at
  ``alpha`` = ``emo_alpha`` (``emovec``, ``merge_emovec``); the GPT prompt as
  ``inference_speech`` builds it (``prompt_embeds``: conditioning + 2 speed rows + text with its
  start / stop ids, ``prepare_gpt_inputs``), the prefill's last hidden state (``prefill_hidden``,
  after ``final_norm``) and logits (``prefill_logits``, ``mel_head``) at the start-mel position;
  20 greedy codes from upstream ``inference_speech`` through its vendored ``generate``
  (``greedy``: ``min_new_tokens`` = 20 keeps the stop id out, no repetition penalty;
  ``greedy_rep``: the same with upstream's default ``repetition_penalty`` 10); and the latent
  that feeds S2Mel (``gpt_latent``: ``UnifiedVoice.forward`` over the prompt and ``greedy``).
"""
from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "indextts2"
SRC = Path(os.environ.get("INDEXTTS_SRC", ROOT.parent / "refsrc" / "index-tts"))
DEPS = Path(os.environ.get("INDEXTTS_DEPS", ROOT.parent / "refsrc" / "index-tts-deps"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(SRC))
sys.path.insert(0, str(DEPS))   # upstream's pinned transformers 4.52.1 (indextts2_fetch.sh says why)
import reference_stubs  # noqa: F401  (torchaudio's CUDA-linked extension loader)


def install_stubs() -> None:
    """Import-time shims for three upstream imports that the GPT never runs:
    ``indextts.utils.tokenizer`` (only ``LANGUAGE_DICT``, read by the 2.5 ``campplus`` speaker mode;
    the module imports whisper and tiktoken) and the packages ``indextts.s2mel.dac`` /
    ``indextts.s2mel.dac.nn`` registered without running their ``__init__`` (which imports
    descript-audiotools' training tools; the length regulator imports only ``dac.nn.quantize``,
    whose file is the real one)."""
    tok = types.ModuleType("indextts.utils.tokenizer")
    tok.LANGUAGE_DICT = {}
    sys.modules["indextts.utils.tokenizer"] = tok
    for pkg in ("indextts.s2mel.dac", "indextts.s2mel.dac.nn"):
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(SRC / pkg.replace(".", "/"))]
        sys.modules[pkg] = mod


install_stubs()
import torch
from omegaconf import OmegaConf

FEAT = 32          # stands in for the w2v-BERT 2.0 width, 1024
TEXT_IDS = 100
CODES = 64
EMO_ALPHA = 0.6
N_GREEDY = 20

# (pattern, replacement) on the ``gpt`` section of upstream's config.yaml: sizes only
TINY = [
    (r"model_dim: 1280", "model_dim: 64"),
    (r"max_mel_tokens: 1815", "max_mel_tokens: 120"),
    (r"max_text_tokens: 600", "max_text_tokens: 40"),
    (r"heads: 20", "heads: 4"),
    (r"layers: 24", "layers: 2"),
    (r"number_text_tokens: 12000", f"number_text_tokens: {TEXT_IDS}"),
    (r"number_mel_codes: 8194", f"number_mel_codes: {CODES + 2}"),
    (r"start_mel_token: 8192", f"start_mel_token: {CODES}"),
    (r"stop_mel_token: 8193", f"stop_mel_token: {CODES + 1}"),
    (r"output_size: 512", "output_size: 32"),
    (r"linear_units: 2048", "linear_units: 64"),
    (r"linear_units: 1024", "linear_units: 48"),
    (r"attention_heads: 8", "attention_heads: 2"),
    (r"attention_heads: 4", "attention_heads: 2"),
    (r"num_blocks: 6", "num_blocks: 2"),
    (r"num_blocks: 4", "num_blocks: 1"),
]


def tiny_yaml() -> str:
    text = (SRC / "checkpoints" / "config.yaml").read_text()
    head, rest = text.split("semantic_codec:", 1)
    for pat, rep in TINY:
        head, n = re.subn(pat, rep, head)
        assert n >= 1, pat
    return head + f"    feature_width: {FEAT}\n\nsemantic_codec:" + rest


def build_gpt(cfg):
    """Upstream's ``UnifiedVoice`` from the tiny ``gpt`` section, its four feature-width modules
    rebuilt by the same classes at :data:`FEAT` (see the module docstring)."""
    from indextts.gpt.conformer_encoder import ConformerEncoder
    from indextts.gpt.model_v2 import UnifiedVoice
    from indextts.gpt.perceiver import PerceiverResampler

    g = OmegaConf.to_container(cfg.gpt)
    g.pop("feature_width")
    gpt = UnifiedVoice(**g)
    cm, em = g["condition_module"], g["emo_condition_module"]

    def conformer(m):
        return ConformerEncoder(input_size=FEAT, output_size=m["output_size"], linear_units=m["linear_units"],
                                attention_heads=m["attention_heads"], num_blocks=m["num_blocks"],
                                input_layer=m["input_layer"])

    gpt.conditioning_encoder = conformer(cm)
    gpt.emo_conditioning_encoder = conformer(em)
    gpt.emo_perceiver_encoder = PerceiverResampler(FEAT, dim_context=em["output_size"], ff_mult=em["perceiver_mult"],
                                                   heads=em["attention_heads"], num_latents=1)
    gpt.emovec_layer = torch.nn.Linear(FEAT, g["model_dim"])
    return gpt.eval()


NORM_GAINS = ("gamma", "ln_1.weight", "ln_2.weight", "ln_f.weight")


def reinit(module: torch.nn.Module, gen: torch.Generator) -> None:
    """Fan-in-scaled normals for matrices, norms near 1, small biases; the speed embedding (zero
    at upstream init) and the positional tables get lively values too. Buffers stay as built
    (the Conformer's sinusoidal table)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if ("norm" in name or name.endswith(NORM_GAINS)) and p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            elif "embedding" in name or name.endswith(("latents", "pos_bias_u", "pos_bias_v")):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p[0].numel()))


def gpt_goldens(gpt, gen) -> dict:
    spk = torch.randn(1, 40, FEAT, generator=gen)
    emo = torch.randn(1, 30, FEAT, generator=gen)
    text = torch.randint(2, TEXT_IDS, (1, 12), generator=gen, dtype=torch.int32)
    spk_len, emo_len = torch.tensor([spk.shape[1]]), torch.tensor([emo.shape[1]])
    with torch.inference_mode():
        cond = gpt.get_conditioning(spk.transpose(1, 2), spk_len)
        emovec_spk = gpt.get_emovec(spk, spk_len)
        emovec_emo = gpt.get_emovec(emo, emo_len)
        # infer_v2 passes the feature width (1024) as every length, which masks nothing for the
        # <= 750 frames of its 15 s references; the frame count masks nothing either
        emovec = gpt.merge_emovec(spk, emo, spk_len, emo_len, alpha=EMO_ALPHA)
        # the prompt exactly as inference_speech assembles it (free-length mode: speed rows 1, 0)
        zero = torch.zeros(1, dtype=torch.long)
        conds = torch.cat((cond + emovec.unsqueeze(1), gpt.speed_emb(zero + 1).unsqueeze(1),
                           gpt.speed_emb(zero).unsqueeze(1)), 1)
        ids, embeds, mask = gpt.prepare_gpt_inputs(conds, text)
        gpt.inference_model.store_mel_emb(embeds)
        out = gpt.inference_model(input_ids=ids, attention_mask=mask, use_cache=False,
                                  output_hidden_states=True, return_dict=True)
        hidden = gpt.final_norm(out.hidden_states[-1][:, -1])
        logits = out.logits[:, -1]
        greedy = {}
        for name, rep in (("greedy", 1.0), ("greedy_rep", 10.0)):
            codes, latent_in = gpt.inference_speech(
                spk, text, None, emo_speech_condition=emo,
                cond_lengths=spk_len, emo_cond_lengths=emo_len, emo_vec=emovec, do_sample=False, num_beams=1,
                repetition_penalty=rep, min_new_tokens=N_GREEDY, max_generate_length=N_GREEDY)
            assert codes.shape[1] == N_GREEDY, codes.shape
            greedy[name] = codes[0].numpy().astype(np.int64)
        codes = torch.from_numpy(greedy["greedy"])[None]
        latent = gpt(latent_in, text, torch.tensor([text.shape[1]]), codes, torch.tensor([codes.shape[1]]), emo,
                     cond_mel_lengths=spk_len, emo_cond_mel_lengths=emo_len, emo_vec=emovec,
                     use_speed=torch.zeros(1, dtype=torch.long))
    return {"spk_feat": spk[0].numpy(), "emo_feat": emo[0].numpy(), "text": text[0].numpy().astype(np.int64),
            "emo_alpha": np.float32(EMO_ALPHA), "cond_latents": cond[0].numpy(),
            "emovec_spk": emovec_spk[0].numpy(), "emovec_emo": emovec_emo[0].numpy(), "emovec": emovec[0].numpy(),
            "prompt_embeds": embeds[0].numpy(), "prefill_hidden": hidden[0].numpy(),
            "prefill_logits": logits[0].numpy(), **greedy, "gpt_latent": latent[0].numpy()}


def main() -> None:
    torch.manual_seed(0)
    yaml = tiny_yaml()
    cfg = OmegaConf.create(yaml)
    gpt = build_gpt(cfg)
    gen = torch.Generator().manual_seed(1234)
    reinit(gpt, gen)
    gpt.post_init_gpt2_config(use_deepspeed=False, kv_cache=True, half=False)
    goldens = gpt_goldens(gpt, gen)
    tiny = OUT / "tiny"
    tiny.mkdir(parents=True, exist_ok=True)
    (tiny / "config.yaml").write_text(yaml)
    # as the published file: UnifiedVoice's own tensors (post_init's alias gpt.wte is not one)
    state = {k: v.contiguous() for k, v in gpt.state_dict().items()
             if not k.startswith(("inference_model.", "gpt.wte."))}
    torch.save(state, tiny / "gpt.pth")
    np.savez_compressed(OUT / "goldens.npz", **{k: np.asarray(v) for k, v in goldens.items()})
    for k, v in goldens.items():
        print(f"{k:16s} {np.asarray(v).shape}")


if __name__ == "__main__":
    main()
