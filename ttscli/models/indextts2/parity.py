"""``ttscli parity indextts2 --golden FILE.npz --model-dir DIR``: the conditioners, the GPT, the
semantic codec, S2Mel and BigVGAN of the checkpoint in DIR against goldens computed by upstream's
code on the same checkpoint (scripts/goldens/indextts2_upstream.py; the format is in
docs/parity.md).

Every figure is computed from the recorded inputs (the normalised w2v-BERT features of a speaker
and an emotion reference, text ids, the reference mel, the style vector, the flow's noise), so it
measures the modules alone.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

REQUIRED = ("spk_feat", "emo_feat", "text", "emo_alpha", "cond_latents", "emovec_spk", "emovec_emo", "emovec",
            "prompt_embeds", "prefill_hidden", "prefill_logits", "greedy", "greedy_rep", "gpt_latent", "codec_ids",
            "codec_quantized", "codec_vq2emb", "ref_mel", "style", "prompt_cond", "cond", "cfm_noise", "s2mel_mel",
            "wav")


def peak_error(ours, ref) -> float:
    """max |ours - ref| / max |ref| (inf when the shapes differ)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    if ours.shape != ref.shape:
        return float("inf")
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-12))


def _codes(gpt, embeds, n: int, penalty: float) -> list[int]:
    from ttscli.lm.sample import SamplingParams

    return list(gpt.generate(embeds, SamplingParams(do_sample=False, repetition_penalty=penalty), max_tokens=n,
                             min_tokens=n))


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    import mlx.core as mx

    from ttscli import hub
    from ttscli.models.base import Check, cosine, golden_only, read_golden_npz
    from ttscli.models.indextts2.config import read_args
    from ttscli.models.indextts2.load import load_codec, load_s2mel_part, load_unified_voice
    from ttscli.models.indextts2.s2mel import code_frames

    golden_only("indextts2", checkpoint, golden, against, backend)
    g = read_golden_npz(golden, REQUIRED)
    folder = Path(checkpoint)
    args = read_args(folder)
    gpt, cond = load_unified_voice(folder, args)
    spk, emo = mx.array(g["spk_feat"])[None], mx.array(g["emo_feat"])[None]

    checks = [Check("speaker latents (cosine)", cosine(np.array(cond.conditioning(spk)[0]), g["cond_latents"]),
                    0.99999, ">="),
              Check("speaker emotion vector (cosine)", cosine(np.array(cond.emovec(spk)[0]), g["emovec_spk"]),
                    0.99999, ">="),
              Check("emotion reference vector (cosine)", cosine(np.array(cond.emovec(emo)[0]), g["emovec_emo"]),
                    0.99999, ">="),
              Check("blended emotion vector (cosine)",
                    cosine(np.array(cond.merge_emovec(spk, emo, float(g["emo_alpha"]))[0]), g["emovec"]), 0.99999,
                    ">=")]

    embeds = gpt.prompt(mx.array(g["cond_latents"])[None], mx.array(g["emovec"])[None], g["text"][None])
    logits, hidden = gpt.prefill(embeds, gpt.make_cache(), return_hidden=True)
    checks += [Check("GPT prompt (max error / peak)", peak_error(np.array(embeds[0]), g["prompt_embeds"]), 1e-5, "<="),
               Check("GPT prefill hidden (cosine)", cosine(np.array(hidden[0]), g["prefill_hidden"]), 0.99999, ">="),
               Check("GPT prefill logits (cosine)", cosine(np.array(logits[0]), g["prefill_logits"]), 0.99999, ">=")]
    for key, penalty in (("greedy", 1.0), ("greedy_rep", 10.0)):
        n = min(frames, len(g[key]))
        ours = _codes(gpt, embeds, n, penalty)
        same = sum(int(a == b) for a, b in zip(ours, g[key][:n].tolist()))
        checks.append(Check(f"GPT {key} codes equal (of {n})", same, n, "==", f"ours {ours}"))
    codes = mx.array(g["greedy"].astype(np.int32))[None]
    latent = gpt.latent(embeds, g["text"][None], codes)
    checks.append(Check("GPT latent for S2Mel (cosine)", cosine(np.array(latent[0]), g["gpt_latent"]), 0.99999, ">="))

    codec = load_codec(hub.part(spec, folder, "semantic_codec") / "semantic_codec" / "model.safetensors", args)
    ids, quantized = codec.quantize(spk)
    s2mel = load_s2mel_part(folder, args)
    content = s2mel.project_latent(mx.array(g["gpt_latent"])[None]) + codec.vq2emb(codes)
    same = int((np.array(ids[0]) == g["codec_ids"]).sum())
    checks += [Check(f"codec ids equal (of {len(g['codec_ids'])})", same, len(g["codec_ids"]), "=="),
               Check("codec features (max error / peak)", peak_error(np.array(quantized[0]), g["codec_quantized"]),
                     1e-4, "<="),
               Check("codec vq2emb + gpt_layer (max error / peak)", peak_error(np.array(content[0]),
                                                                               g["codec_vq2emb"]), 1e-4, "<=")]
    n_ref = g["ref_mel"].shape[1]
    prompt = s2mel.length_regulator(mx.array(g["codec_quantized"])[None], n_ref)
    regulated = s2mel.length_regulator(mx.array(g["codec_vq2emb"])[None], code_frames(len(g["greedy"])))
    mu = mx.array(np.concatenate([g["prompt_cond"], g["cond"]]))[None]
    mel = s2mel.cfm.inference(mu, mx.array(g["ref_mel"].T)[None], mx.array(g["style"])[None],
                              mx.array(g["cfm_noise"].T)[None], 25, 0.7)[:, n_ref:]
    checks += [Check("length regulator, reference (max error / peak)", peak_error(np.array(prompt[0]),
                                                                                  g["prompt_cond"]), 1e-4, "<="),
               Check("length regulator, codes (max error / peak)", peak_error(np.array(regulated[0]), g["cond"]),
                     1e-4, "<="),
               Check("S2Mel mel (max error / peak)", peak_error(np.array(mel[0]), g["s2mel_mel"].T), 1e-4, "<=")]

    from ttscli.codecs.bigvgan import load_bigvgan

    vocoder = load_bigvgan(hub.part(spec, folder, "bigvgan"))
    wav = vocoder(mx.array(g["s2mel_mel"].T)[None])
    checks.append(Check("BigVGAN waveform (max error / peak)", peak_error(np.array(wav[0]), g["wav"]), 1e-4, "<="))
    return checks
