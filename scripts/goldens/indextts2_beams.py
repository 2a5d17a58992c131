"""Beam-search goldens for IndexTTS2's text-to-semantic GPT, computed by the upstream index-tts code.

Run as ``indextts2_upstream.py`` is (its header says how upstream and its pinned transformers are
put on the path), after it has written ``tests/fixtures/indextts2/``:

    INDEXTTS_SRC=../refsrc/index-tts INDEXTTS_DEPS=../refsrc/index-tts-deps \\
        REFVENV/bin/python scripts/goldens/indextts2_beams.py

The tiny ``gpt.pth`` is read back through upstream's ``load_checkpoint`` into the module that
``indextts2_upstream.build_gpt`` builds, and ``UnifiedVoice.inference_speech`` runs upstream's
vendored Hugging Face ``generate`` on the goldens' ``spk_feat`` / ``emo_feat`` / ``text`` /
``emovec`` with ``do_sample=False``, so each run is deterministic beam search (``_beam_search``
with the ``BeamSearchScorer``) or greedy search. Writes ``tests/fixtures/indextts2/beams.npz``,
one int64 array of generated codes per run, exactly as ``inference_speech`` returns them (a
trailing stop code where the best hypothesis ended with one), and ``<name>_max`` / ``<name>_min``
(the ``max_generate_length`` / ``min_new_tokens`` each run used):

- ``beam_free``: 3 beams, repetition penalty 10, length penalty 0 (``infer_generator``'s values
  for those three), free length up to 40 new codes, the stop allowed from the first.
- ``beam_forced``: the same with ``min_new_tokens`` = ``max_generate_length`` = 20 (no stop).
- ``beam_norep``: as ``beam_free`` without the repetition penalty (codes recur).
- ``beam_lp2``: as ``beam_free`` with length penalty 2, which favours long hypotheses enough that
  the best one runs to the 40-code limit without the stop.
- ``beam_short``: as ``beam_free`` up to 6 codes: no hypothesis reaches the stop in time, so the
  best running beam comes back without one (the limit case).
- ``greedy_free``: one beam, repetition penalty 10, up to 40 codes with the stop allowed.

Sampled decoding with ``infer_generator``'s settings (``do_sample=True``, temperature 0.8, top-k
30, top-p 0.8, repetition penalty 10), up to 30 codes: ``sample_beam`` (3 beams: HF's beam
sampling) and ``sample_one`` (one row), with ``<name>_noise``, the Gumbel noise of each draw
(``[draws, K x V]`` / ``[draws, V]``). For these two runs ``torch.multinomial`` is replaced by
the Gumbel-top-k draw with that recorded noise (:func:`replayed_multinomial`): sampling ``n`` ids
without replacement from ``probs`` is taking the ``n`` largest ``log(probs) + Gumbel``, the same
distribution ``torch.multinomial`` draws from, but with noise another implementation can replay,
so every other step of upstream's sampling (the processors, the beam scorer) is checked draw for
draw.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import indextts2_upstream as up  # puts upstream and its pinned transformers on the path
import torch
from omegaconf import OmegaConf

# name -> (num_beams, repetition_penalty, length_penalty, min_new_tokens, max_generate_length)
RUNS = {
    "beam_free": (3, 10.0, 0.0, 0, 40),
    "beam_forced": (3, 10.0, 0.0, 20, 20),
    "beam_norep": (3, 1.0, 0.0, 0, 40),
    "beam_lp2": (3, 10.0, 2.0, 0, 40),
    "beam_short": (3, 10.0, 0.0, 0, 6),
    "greedy_free": (1, 10.0, 0.0, 0, 40),
}
# name -> num_beams of the sampled runs (infer_generator's sampling settings, up to SAMPLED_MAX codes)
SAMPLED = {"sample_beam": 3, "sample_one": 1}
SAMPLED_MAX = 30


class replayed_multinomial:
    """``torch.multinomial(probs, n)`` (without replacement, one row) as the top ``n`` of
    ``log(probs)`` plus fresh Gumbel noise from a seeded numpy generator; ``noise`` keeps each
    draw's noise."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.noise: list[np.ndarray] = []

    def __call__(self, probs, num_samples, replacement=False, generator=None):
        assert probs.shape[0] == 1 and not replacement
        u = self.rng.random(probs.shape[1], dtype=np.float64)
        g = (-np.log(-np.log(np.clip(u, 1e-12, 1.0 - 1e-12)))).astype(np.float32)
        self.noise.append(g)
        keys = torch.log(probs) + torch.from_numpy(g)[None]
        return torch.topk(keys, num_samples, dim=-1).indices


def main() -> None:
    from indextts.utils.checkpoint import load_checkpoint

    tiny = up.OUT / "tiny"
    g = np.load(up.OUT / "goldens.npz")
    gpt = up.build_gpt(OmegaConf.load(tiny / "config.yaml"))
    load_checkpoint(gpt, str(tiny / "gpt.pth"))
    gpt.post_init_gpt2_config(use_deepspeed=False, kv_cache=True, half=False)
    gpt.eval()
    spk, emo = (torch.from_numpy(g[k])[None] for k in ("spk_feat", "emo_feat"))
    text = torch.from_numpy(g["text"]).int()[None]
    emovec = torch.from_numpy(g["emovec"])[None]
    spk_len, emo_len = torch.tensor([spk.shape[1]]), torch.tensor([emo.shape[1]])
    out = {}
    with torch.inference_mode():
        for name, (beams, rep, lp, lo, hi) in RUNS.items():
            codes, _ = gpt.inference_speech(spk, text, None, emo_speech_condition=emo, cond_lengths=spk_len,
                                            emo_cond_lengths=emo_len, emo_vec=emovec, do_sample=False,
                                            num_beams=beams, repetition_penalty=rep, length_penalty=lp,
                                            min_new_tokens=lo, max_generate_length=hi)
            out[name] = codes[0].numpy().astype(np.int64)
            out[name + "_min"] = np.int64(lo)
            out[name + "_max"] = np.int64(hi)
            print(f"{name:12s} {out[name].tolist()}")
        real = torch.multinomial
        for seed, (name, beams) in enumerate(SAMPLED.items()):
            draw = replayed_multinomial(seed)
            torch.multinomial = draw
            try:
                codes, _ = gpt.inference_speech(spk, text, None, emo_speech_condition=emo, cond_lengths=spk_len,
                                                emo_cond_lengths=emo_len, emo_vec=emovec, do_sample=True,
                                                temperature=0.8, top_k=30, top_p=0.8, num_beams=beams,
                                                repetition_penalty=10.0, length_penalty=0.0,
                                                max_generate_length=SAMPLED_MAX)
            finally:
                torch.multinomial = real
            out[name] = codes[0].numpy().astype(np.int64)
            out[name + "_noise"] = np.stack(draw.noise)
            print(f"{name:12s} {out[name].tolist()} ({len(draw.noise)} draws)")
    np.savez_compressed(up.OUT / "beams.npz", **out)


if __name__ == "__main__":
    main()
