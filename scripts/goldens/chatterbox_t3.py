"""Tiny Chatterbox checkpoint (T3 side) + goldens from the upstream reference (chatterbox-tts 0.1.7).

Rerun from the repo root, in the throwaway reference venv (scripts/goldens/README.md):

    REFVENV/bin/python scripts/goldens/chatterbox_t3.py

Writes into tests/fixtures/chatterbox/tiny/ the T3, voice-encoder and conditionals files, in the published layout
and under the published names (s3gen.safetensors beside them is written by chatterbox_s3gen.py):

    t3_cfg.safetensors   T3 (Llama blocks, llama3 RoPE) at hidden 64 / 2 layers / head_dim 64 (the real RoPE
                         frequencies), every vocabulary and special-token id at its real value (704 text, 8194 speech)
    ve.safetensors       VoiceEncoder: 3-layer LSTM over 40 mels, hidden 32, embedding 256
    tokenizer.json       a small HF BPE tokenizer with the real special tokens ([STOP]=0, [START]=255)
    conds.pt             the default voice, saved by upstream ``Conditionals.save`` (a torch pickle)

and tests/fixtures/chatterbox/t3_goldens.npz (inputs and outputs of each case, see CASES below).

Sizes are hard-coded inside the upstream constructors, so the tiny widths go in through the
upstream registries (LLAMA_CONFIGS, the Perceiver default, VoiceEncConfig), not through copies.
Upstream random init is not representative (norms exactly 1, zero biases), so every tensor is
re-initialised from a fixed seed before saving.  The greedy cases run upstream ``T3.inference``
with temperature 1e-6 (its multinomial then draws the argmax); the EOS row of speech_head is
scaled down so that 20 steps run without stopping.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np
import reference_stubs  # noqa: F401  (torchaudio extension + identity watermarker)
import torch
from chatterbox.models.t3 import llama_configs
from chatterbox.models.t3.modules import cond_enc as cond_enc_mod
from chatterbox.models.t3.modules.perceiver import Perceiver
from chatterbox.models.t3.modules.t3_config import T3Config
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "chatterbox"
TINY = FIX / "tiny"

HIDDEN, LAYERS, HEADS, FFN = 64, 2, 1, 128   # head_dim 64 as the real model (the loader infers heads = hidden // 64)
VE_HIDDEN = 32
TEXT = "hello world, this is the tiny check"

TINY_LLAMA = dict(llama_configs.LLAMA_520M_CONFIG_DICT, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=HEADS, head_dim=HIDDEN // HEADS,
                  intermediate_size=FFN, attn_implementation="eager")


def build_t3():
    from chatterbox.models.t3.t3 import LLAMA_CONFIGS, T3

    llama_configs.LLAMA_CONFIGS["tiny"] = TINY_LLAMA
    LLAMA_CONFIGS["tiny"] = TINY_LLAMA
    cond_enc_mod.Perceiver = functools.partial(Perceiver, pre_attention_query_token=32,
                                               pre_attention_query_size=HIDDEN, embedding_dim=HIDDEN,
                                               num_attn_heads=4)
    hp = T3Config.english_only()
    hp.llama_config_name = "tiny"
    return T3(hp).eval()


def reinit(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("similarity_"):
                continue
            shape = p.shape
            if "norm" in name and name.endswith("weight"):
                v = 1.0 + 0.1 * torch.randn(shape, generator=g)
            elif name.endswith("bias") or "bias_" in name:
                v = 0.1 * torch.randn(shape, generator=g)
            elif "pos_emb" in name:
                v = 0.3 * torch.randn(shape, generator=g)
            elif name in ("text_emb.weight", "speech_emb.weight", "tfmr.embed_tokens.weight"):
                v = torch.randn(shape, generator=g)
            elif name.endswith("pre_attention_query"):
                v = 0.5 * torch.randn(shape, generator=g)
            elif p.ndim == 2:
                v = torch.randn(shape, generator=g) / np.sqrt(shape[1])
            else:
                v = torch.randn(shape, generator=g)
            p.copy_(v)


def write_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["[STOP]", "[UNK]", "[SPACE]", "[PAD]", "[SEP]", "[CLS]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'\"-")
    vocab = {t: i for i, t in enumerate(specials)}
    for c in chars:
        vocab[c] = len(vocab)
    merges = [("t", "h"), ("th", "e"), ("l", "l"), ("ll", "o"), ("i", "s"), ("h", "e"), ("he", "llo")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    while len(vocab) < 255:                   # contiguous ids, as the published vocabulary is
        vocab[f"[unused{len(vocab)}]"] = len(vocab)
    vocab["[START]"] = 255
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials + ["[START]"])
    tok.save(str(path))


def main() -> None:
    from chatterbox.models.t3.modules.cond_enc import T3Cond
    from chatterbox.models.tokenizers import EnTokenizer
    from chatterbox.models.voice_encoder import VoiceEncoder
    from chatterbox.models.voice_encoder.config import VoiceEncConfig
    from chatterbox.tts import Conditionals, punc_norm
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TopPLogitsWarper,
    )
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    TINY.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    out: dict[str, np.ndarray] = {}

    # --- T3 checkpoint ------------------------------------------------------------------------
    t3 = build_t3()
    reinit(t3, 1)
    with torch.no_grad():
        t3.speech_head.weight[t3.hp.stop_speech_token] *= 0.05   # keep EOS out of the 20 greedy steps
        # a few loud rows (BOS among them) so greedy decoding repeats itself and the repetition
        # penalty, BOS included, changes the tokens
        t3.speech_head.weight[[t3.hp.start_speech_token, 100, 101, 102]] *= 3.0
    save_file({k: v.contiguous() for k, v in t3.state_dict().items()}, str(TINY / "t3_cfg.safetensors"))

    rot = LlamaRotaryEmbedding(t3.cfg)
    out["rope_inv_freq"] = rot.inv_freq.double().numpy()

    # --- tokenizer ----------------------------------------------------------------------------
    write_tokenizer(TINY / "tokenizer.json")
    tokenizer = EnTokenizer(str(TINY / "tokenizer.json"))
    text = punc_norm(TEXT)
    ids = tokenizer.encode(text)
    out["text_ids"] = np.array(ids, np.int64)
    framed = [t3.hp.start_text_token] + ids + [t3.hp.stop_text_token]
    out["text_framed"] = np.array(framed, np.int64)

    # --- default voice (conds.pt) -------------------------------------------------------------
    g = torch.Generator().manual_seed(2)
    spk = torch.randn(1, 256, generator=g).abs()
    spk = spk / spk.norm()
    prompt = torch.randint(0, 6561, (1, 150), generator=g)
    T = 40
    gen = dict(prompt_token=torch.randint(0, 6561, (1, T), generator=g), prompt_token_len=torch.tensor([T]),
               prompt_feat=torch.randn(1, 2 * T, 80, generator=g), prompt_feat_len=None,
               embedding=torch.randn(1, 192, generator=g))
    conds = Conditionals(T3Cond(speaker_emb=spk, cond_prompt_speech_tokens=prompt,
                                emotion_adv=0.5 * torch.ones(1, 1, 1)), gen)
    conds.save(TINY / "conds.pt")

    def fresh_cond(exaggeration: float) -> T3Cond:
        return T3Cond(speaker_emb=spk.clone(), cond_prompt_speech_tokens=prompt.clone(),
                      emotion_adv=exaggeration * torch.ones(1, 1, 1))

    # --- prefill (CFG batch of two) -----------------------------------------------------------
    text_tokens = torch.tensor([framed, framed])
    with torch.inference_mode():
        for exag in (0.5, 0.7):
            tag = f"exag{int(exag * 10)}"
            cond_emb = t3.prepare_conditioning(fresh_cond(exag))
            out[f"cond_emb_{tag}"] = cond_emb[0].numpy()
            embeds, _ = t3.prepare_input_embeds(
                t3_cond=fresh_cond(exag), text_tokens=text_tokens,
                speech_tokens=t3.hp.start_speech_token * torch.ones_like(text_tokens[:, :1]),
                cfg_weight=0.5)
            bos = t3.speech_emb(torch.tensor([[t3.hp.start_speech_token]])) + t3.speech_pos_emb.get_fixed_embedding(0)
            inputs = torch.cat([embeds, torch.cat([bos, bos])], dim=1)
            out[f"prefill_embeds_{tag}"] = inputs.numpy()
            h = t3.tfmr(inputs_embeds=inputs).last_hidden_state
            out[f"prefill_logits_{tag}"] = t3.speech_head(h[:, -1]).numpy()

        # --- greedy decoding through upstream T3.inference --------------------------------------
        for rp in (1.0, 1.2):
            toks = t3.inference(t3_cond=fresh_cond(0.5), text_tokens=text_tokens, max_new_tokens=20,
                                temperature=1e-6, top_p=1.0, min_p=0.05, repetition_penalty=rp, cfg_weight=0.5)
            toks = toks[0].numpy()
            assert len(toks) == 20 and t3.hp.stop_speech_token not in toks, toks
            out[f"greedy_rp{int(rp * 10)}"] = toks.astype(np.int64)
        assert not np.array_equal(out["greedy_rp10"], out["greedy_rp12"]), "the penalty changed nothing"

    # --- the logits processors in upstream's order ------------------------------------------
    g = torch.Generator().manual_seed(3)
    settings = np.array([[1.2, 0.8, 0.05, 1.0], [1.3, 0.5, 0.1, 0.8], [1.0, 1.0, 0.0, 0.9], [1.2, 2.0, 0.02, 0.95]])
    seen = torch.tensor([[6561, 5, 7, 5, 100]])
    logits = 3.0 * torch.randn(len(settings), 8194, generator=g)
    processed = []
    for (rp, temp, min_p, top_p), row in zip(settings, logits):
        x = RepetitionPenaltyLogitsProcessor(float(rp))(seen, row[None].clone())
        if temp != 1.0:
            x = x / float(temp)
        x = MinPLogitsWarper(float(min_p))(seen, x) if min_p > 0 else x
        x = TopPLogitsWarper(float(top_p))(seen, x)
        processed.append(torch.log_softmax(x, dim=-1)[0])
    out["proc_settings"] = settings
    out["proc_seen"] = seen[0].numpy()
    out["proc_logits"] = logits.numpy()
    out["proc_logprobs"] = torch.stack(processed).numpy()

    # --- voice encoder -------------------------------------------------------------------------
    hp = VoiceEncConfig()
    hp.ve_hidden_size = VE_HIDDEN
    ve = VoiceEncoder(hp).eval()
    reinit(ve, 4)
    save_file({k: v.contiguous() for k, v in ve.state_dict().items()}, str(TINY / "ve.safetensors"))
    sr = 16000
    rng = np.random.default_rng(5)
    t = np.arange(int(3.3 * sr)) / sr
    f0 = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12)) * (0.5 + 0.5 * np.sin(2 * np.pi * 2.1 * t) ** 2)
    wav = (0.2 * voiced + 0.01 * rng.standard_normal(len(t))).astype(np.float32)
    wav[: int(0.4 * sr)] *= 0.001         # quiet lead-in and tail for trim(top_db=20) to cut
    wav[-int(0.3 * sr):] *= 0.001
    out["ve_wav"] = wav
    import librosa
    from chatterbox.models.voice_encoder.melspec import melspectrogram
    trimmed = librosa.effects.trim(wav, top_db=20)[0]
    out["ve_trimmed_len"] = np.array(len(trimmed))
    out["ve_mel"] = melspectrogram(trimmed, hp).T.astype(np.float32)
    out["ve_embed"] = ve.embeds_from_wavs([wav], sample_rate=sr)

    np.savez_compressed(FIX / "t3_goldens.npz", **out)
    (FIX / "t3_goldens.json").write_text(json.dumps(
        {"text": TEXT, "normalized": text, "hidden": HIDDEN, "layers": LAYERS, "heads": HEADS,
         "ve_hidden": VE_HIDDEN, "cfg_weight": 0.5, "min_p": 0.05, "top_p": 1.0, "temperature": 1e-6}, indent=1) + "\n")
    print("wrote", sorted(p.name for p in TINY.iterdir()), "and t3_goldens.npz:", {k: v.shape for k, v in out.items()})


if __name__ == "__main__":
    main()
