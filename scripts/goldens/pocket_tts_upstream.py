"""Tiny Pocket TTS checkpoint + goldens from the upstream package (pocket-tts 4.0.1).

Rerun from the repo root, in the throwaway reference venv (scripts/goldens/README.md):

    REFVENV/bin/python scripts/goldens/pocket_tts_upstream.py

Writes tests/fixtures/pocket_tts/tiny/languages/english/ in the published layout:

    model.safetensors        upstream TTSModel's state dict (flow_lm.*, and mimi.* in Kyutai's layout),
                             saved with safetensors as upstream's POCKET_TTS_SAVE_WEIGHTS does
    tokenizer.json           a small Unigram/Metaspace ``tokenizers`` model (the released one is a
                             SentencePiece model converted the same way); n_bins is its size
    config.json              upstream's Config (its yaml) for these sizes, as JSON
    embeddings/alba.safetensors  a built-in voice under the default voice's name: upstream
                             ``export_model_state`` of the state ``get_state_for_audio_prompt``
                             builds from a synthetic reference

and tests/fixtures/pocket_tts/goldens.npz (see the keys at the end).

The model is upstream's own classes (TTSModel, FlowLMModel, build_mimi) at small widths keeping
every structural feature of english.yaml: bos_before_voice, the 200 Hz Mimi transformer with a
sliding window (here 20 steps, shorter than every test signal), the 32 -> 512 latent projections
(here 8 -> 32), LSD with two time conditions. Upstream init leaves norms at 1 and biases at 0,
so every tensor is re-initialised from a fixed seed. The EOS bias is set to the threshold so the
EOS logit crosses it now and then: the goldens hold both decisions. Random draws upstream makes
inside generation (the flow head's noise) are recorded and fed to ours.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import safetensors.torch
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "pocket_tts"
TINY = OUT / "tiny" / "languages" / "english"
CORPUS = ("Hello world. I am a pocket sized text to speech model. The quick brown fox jumps over the lazy dog. "
          "She sells sea shells by the sea shore. How are you today? It is a fine day, isn't it! "
          "Numbers like 3.5 and 42 appear too; colons: commas, and dashes - all of them.")
TEXT = "hello world, how are you today"
SAMPLE_RATE = 24000


def tokenizer(path: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=96, special_tokens=["<unk>"], unk_token="<unk>")
    tok.train_from_iterator([CORPUS] * 4, trainer)
    tok.save(str(path))
    return tok.get_vocab_size()


def config(n_bins: int, tokenizer_path: Path) -> dict:
    return {
        "flow_lm": {"insert_bos_before_voice": True, "dtype": "float32",
                    "flow": {"depth": 2, "dim": 32},
                    "transformer": {"d_model": 64, "hidden_scale": 2, "max_period": 10000, "num_heads": 4,
                                    "num_layers": 2},
                    "lookup_table": {"dim": 64, "n_bins": n_bins, "tokenizer": "tokenizers",
                                     "tokenizer_path": str(tokenizer_path)}},
        "mimi": {"dtype": "float32", "sample_rate": SAMPLE_RATE, "inner_dim": 8, "outer_dim": 32, "channels": 1,
                 "frame_rate": 12.5,
                 "seanet": {"dimension": 32, "channels": 1, "n_filters": 4, "n_residual_layers": 1,
                            "ratios": [6, 5, 4], "kernel_size": 7, "residual_kernel_size": 3, "last_kernel_size": 3,
                            "dilation_base": 2, "pad_mode": "constant", "compress": 2},
                 "transformer": {"d_model": 32, "num_heads": 2, "num_layers": 2, "layer_scale": 0.01,
                                 "context": 20, "dim_feedforward": 64, "input_dimension": 32,
                                 "output_dimensions": [32]},
                 "quantizer": {"dimension": 8, "output_dimension": 32}},
        "replace_characters": {"\u2019": "'", "\u2018": "'"},
    }


def reinit(model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if name.endswith("freqs"):
                continue
            if p.ndim >= 2:
                fan_in = math.prod(p.shape[1:])
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
            elif name.endswith("emb_std"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif name.endswith("scale"):
                p.copy_(0.3 + 0.2 * torch.rand(p.shape, generator=g))
            elif name.endswith(("weight", "alpha")):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
        model.flow_lm.out_eos.bias.fill_(-4.0)


def reference_audio() -> np.ndarray:
    """1.2 s of a voiced-like signal with a quiet tail (end_on_pause trims it)."""
    t = np.arange(int(1.2 * SAMPLE_RATE)) / SAMPLE_RATE
    rng = np.random.default_rng(0)
    wav = 0.3 * np.sin(2 * np.pi * 140 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.02 * rng.standard_normal(t.size)
    wav[int(1.0 * SAMPLE_RATE):] *= 0.001
    return wav.astype(np.float32)


class Recorder:
    """Records the flow LM's per-call hidden (out_norm), EOS logit, noise and sampled latent."""

    def __init__(self, tts):
        self.hidden, self.eos, self.noise, self.latent = [], [], [], []
        tts.flow_lm.out_norm.register_forward_hook(lambda m, i, o: self.hidden.append(o[:, -1].detach().clone()))
        tts.flow_lm.out_eos.register_forward_hook(lambda m, i, o: self.eos.append(o.detach().clone()))
        normal = torch.nn.init.normal_

        def record(tensor, mean=0.0, std=1.0, generator=None):
            out = normal(tensor, mean, std, generator)
            self.noise.append(tensor.detach().clone())
            return out
        torch.nn.init.normal_ = record
        original = tts.flow_lm._sample_next_latent

        def sample(*a, **kw):
            latent, eos = original(*a, **kw)
            self.latent.append(latent.detach().clone())
            return latent, eos
        tts.flow_lm._sample_next_latent = sample

    def reset(self):
        for xs in (self.hidden, self.eos, self.noise, self.latent):
            xs.clear()


def main() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from pocket_tts.data.audio_utils import end_on_pause
    from pocket_tts.models.model_state import export_model_state
    from pocket_tts.models.text_chunking import prepare_text_prompt
    from pocket_tts.models.tts_model import TTSModel, stamp_state_names
    from pocket_tts.models.mimi import build_mimi
    from pocket_tts.modules.stateful_module import increment_steps, init_states
    from pocket_tts.utils.config import Config

    TINY.mkdir(parents=True, exist_ok=True)
    (TINY / "embeddings").mkdir(exist_ok=True)
    n_bins = tokenizer(TINY / "tokenizer.json")
    cfg_dict = config(n_bins, TINY / "tokenizer.json")
    cfg = Config(**cfg_dict)
    tts = TTSModel._from_pydantic_config(cfg, temp=0.3, sampler_decode_steps=1, noise_clamp=None,
                                         eos_threshold=-4.0, origin=None)
    tts.flow_lm.speaker_proj_weight = torch.nn.Parameter(torch.zeros(64, 8))
    tts.mimi = build_mimi(cfg.mimi)
    stamp_state_names(tts)
    reinit(tts)
    tts.eval()
    safetensors.torch.save_file(tts.state_dict(), str(TINY / "model.safetensors"))
    (TINY / "model.safetensors").chmod(0o644)
    public = dict(cfg_dict)
    public["flow_lm"] = dict(cfg_dict["flow_lm"], lookup_table=dict(cfg_dict["flow_lm"]["lookup_table"],
                                                                      tokenizer_path="tokenizer.json"))
    (TINY / "config.json").write_text(json.dumps(public, indent=1) + "\n", encoding="utf-8")

    g: dict[str, np.ndarray] = {}
    # --- clone: the reference -> Mimi latents -> the voice prompt -> the stored state (the built-in voice)
    ref = reference_audio()
    trimmed = end_on_pause(torch.from_numpy(ref)[None], SAMPLE_RATE)
    with torch.no_grad():
        latents = tts.mimi.encode_to_latent(trimmed[None])
    rec = Recorder(tts)
    torch.manual_seed(1)
    state = tts.get_state_for_audio_prompt(torch.from_numpy(ref)[None])
    export_model_state(state, TINY / "embeddings" / "alba.safetensors")
    (TINY / "embeddings" / "alba.safetensors").chmod(0o644)
    g.update(ref_audio=ref, voice_latents=latents[0].numpy(),
             voice_prompt_hidden=rec.hidden[0][0].numpy())
    rec.reset()

    # --- speak with the stored voice: text prompt, prefill, frames with recorded noise, EOS, audio
    text, guess = prepare_text_prompt(TEXT, False, False)
    tokens = tts.flow_lm.conditioner.prepare(text)[0].numpy()
    torch.manual_seed(2)
    audio = tts.generate_audio(state, TEXT, frames_after_eos=2).numpy()
    g.update(text=np.array(text), voice=np.array("alba"), tokens=tokens.astype(np.int32), frames_after_eos=np.array(2),
             prefill_hidden=rec.hidden[0][0].numpy(),
             step_hidden=torch.cat(rec.hidden[1:]).numpy(),
             eos_logits=torch.cat(rec.eos[1:])[:, 0].numpy(),
             noise=torch.cat(rec.noise[1:]).numpy(),
             latents=torch.cat(rec.latent[1:])[:, 0].numpy() if rec.latent[1].ndim == 3
             else torch.cat(rec.latent[1:]).numpy(),
             audio=audio)

    # --- the Mimi decoder alone, one call over all frames from a fresh state (no fade)
    lat = torch.from_numpy(g["latents"])[None]
    with torch.no_grad():
        mimi_state = init_states(tts.mimi, batch_size=1, sequence_length=1000)
        x = lat * tts.flow_lm.emb_std + tts.flow_lm.emb_mean
        wav = tts.mimi.decode_from_latent(x, mimi_state)
        increment_steps(tts.mimi, mimi_state, increment=16 * lat.shape[1])
    g["mimi_decoded"] = wav[0, 0].numpy()
    np.savez_compressed(OUT / "goldens.npz", **g)
    for k, v in g.items():
        print(k, v.shape, v.dtype)


if __name__ == "__main__":
    main()
