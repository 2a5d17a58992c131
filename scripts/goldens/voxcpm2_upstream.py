"""Tiny VoxCPM2 checkpoint + goldens from the upstream package (voxcpm 2.0.3).

Rerun from the repo root, in the throwaway reference venv (scripts/goldens/README.md):

    REFVENV/bin/python scripts/goldens/voxcpm2_upstream.py

Writes tests/fixtures/voxcpm2/tiny/ in the published Hugging Face layout (openbmb/VoxCPM2), the
files upstream's ``VoxCPM2Model.from_local`` reads:

    config.json              VoxCPMConfig (lm_config, encoder_config, dit_config, audio_vae_config ...)
    model.safetensors        every tensor of VoxCPM2Model but the AudioVAE's
    audiovae.pth             the AudioVAE state dict (weight-normed convs as weight_g / weight_v,
                             and the decoder's sr_bin_boundaries buffer), saved with torch.save
    tokenizer.json, tokenizer_config.json   a small BPE (Metaspace) ``tokenizers`` model loaded
                             as LlamaTokenizerFast, as the released MiniCPM tokenizer is

and tests/fixtures/voxcpm2/goldens.npz (keys at the end; ``text`` and ``prompt_text`` are the
modes' target text and continuation transcript: the ``ttscli parity voxcpm2 --golden`` format).
The model is upstream's own classes
at small widths keeping every structural feature of the released config: GQA with kv_channels
different from hidden/heads (as the 1024-wide local encoder and DiT with 128-wide heads), a
no-RoPE residual LM, LongRoPE (here with max_position_embeddings above the original so the long
factors and the cos/sin scaling factor are exercised), and muP switched on (the released config
has it off, which is the identity case of the same scalings).  Upstream init leaves norms at 1
and biases at 0, so every tensor is re-initialised from a fixed seed; the stop head's bias-free
logits are shifted through stop_proj's bias so that both stop decisions occur.  The diffusion
noise upstream draws with torch.randn is recorded and fed to ours.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import safetensors.torch
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs

reference_stubs.install()

OUT = ROOT / "tests" / "fixtures" / "voxcpm2"
TINY = OUT / "tiny"
CORPUS = ("Hello world. The quick brown fox jumps over the lazy dog. Speak softly and clearly. "
          "你好世界 今天 很好。 A warm young voice, calm and slow.")
TEXTS = ("Hello world.", "你好世界 今天很好。")
PROMPT_TEXT = "Speak softly. "     # the continuation prompt's transcript
KV = 16
STEPS = 10            # upstream's default inference_timesteps
CFG = 2.0             # upstream's default cfg_value
MAX_PATCHES = 12


def lm_config() -> dict:
    rope = {"type": "longrope", "long_factor": [1.0 + i / 8 for i in range(KV // 2)],
            "short_factor": [1.0 + i / 16 for i in range(KV // 2)], "original_max_position_embeddings": 64}
    return {"bos_token_id": 1, "eos_token_id": 2, "hidden_size": 64, "intermediate_size": 96,
            "max_position_embeddings": 256, "num_attention_heads": 4, "num_hidden_layers": 2,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_scaling": rope, "vocab_size": 0,
            "use_mup": True, "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4,
            "rope_theta": 10000, "kv_channels": KV}


def config(vocab: int) -> dict:
    lm = lm_config()
    lm["vocab_size"] = vocab
    local = {"hidden_dim": 32, "ffn_dim": 48, "num_heads": 4, "num_layers": 2, "kv_channels": KV}
    return {
        "architecture": "voxcpm2", "lm_config": lm, "patch_size": 4, "feat_dim": 8,
        "scalar_quantization_latent_dim": 16, "scalar_quantization_scale": 9,
        "residual_lm_num_layers": 2, "residual_lm_no_rope": True,
        "encoder_config": dict(local),
        "dit_config": {**local, "mean_mode": False,
                       "cfm_config": {"sigma_min": 1e-6, "solver": "euler", "t_scheduler": "log-norm",
                                      "inference_cfg_rate": 2.0}},
        "audio_vae_config": {"encoder_dim": 4, "encoder_rates": [2, 2], "latent_dim": 8, "decoder_dim": 16,
                             "decoder_rates": [2, 2, 3], "sr_bin_boundaries": [20000, 30000, 40000],
                             "sample_rate": 16000, "out_sample_rate": 48000},
        "max_length": 256, "device": "cpu", "dtype": "float32",
    }


def tokenizer(folder: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    specials = ["<unk>", "<s>", "</s>"] + [f"<reserved_{i}>" for i in range(3, 110)]
    trainer = trainers.BpeTrainer(vocab_size=260, special_tokens=specials, show_progress=False)
    tok.train_from_iterator([CORPUS] * 8, trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": True, "add_eos_token": False}, indent=1))
    return tok.get_vocab_size()


def randomise(model: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight_g"):
                p.copy_(p.abs().mean() * (1 + 0.1 * torch.rand(p.shape, generator=g)))
            elif "alpha" in name or name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + 0.2 * torch.rand(p.shape, generator=g))
            elif "scale_embed" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
            else:
                fan_in = max(1, p[0].numel())
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)


def save_checkpoint(model, cfg: dict) -> None:
    (TINY / "config.json").write_text(json.dumps(cfg, indent=1))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    vae = {k[len("audio_vae."):]: v for k, v in state.items() if k.startswith("audio_vae.")}
    rest = {k: v for k, v in state.items() if not k.startswith("audio_vae.")}
    safetensors.torch.save_file(rest, str(TINY / "model.safetensors"))
    torch.save(vae, TINY / "audiovae.pth")


class RecordedNoise:
    """torch.randn inside the CFM solver, drawn from a seeded generator and kept."""

    def __init__(self):
        self.g = torch.Generator().manual_seed(7)
        self.randn = torch.randn        # the real one: the solver's module name is patched
        self.draws: list[np.ndarray] = []

    def __call__(self, shape, device=None, dtype=None):
        z = self.randn(shape, generator=self.g, dtype=torch.float32)
        self.draws.append(z.numpy().copy())
        return z.to(dtype or torch.float32)


def run_inference(model, text_token, text_mask, feat, feat_mask, noise: RecordedNoise, streaming=False):
    import voxcpm.modules.locdit.unified_cfm as cfm

    original = cfm.torch.randn
    stops: list[np.ndarray] = []
    hook = model.stop_head.register_forward_hook(lambda m, i, o: stops.append(o.detach().numpy().copy()))
    cfm.torch.randn = noise
    try:
        if streaming:
            chunks = [c.numpy().copy() for c, _ in model.inference_streaming(
                text_token, text_mask, feat, feat_mask, max_len=MAX_PATCHES, inference_timesteps=STEPS,
                cfg_value=CFG)]
            return chunks, stops
        latent, generated = model.inference(text_token, text_mask, feat, feat_mask, max_len=MAX_PATCHES,
                                            inference_timesteps=STEPS, cfg_value=CFG)
        return (latent.numpy().copy(), generated.numpy().copy()), stops
    finally:
        cfm.torch.randn = original
        hook.remove()


def prompt(model, text: str, ref_feat=None, prompt_text="", prompt_feat=None):
    """Upstream's own prompt assembly (_generate's four modes), on features instead of files."""
    tok = lambda s: torch.LongTensor(model.text_tokenizer(s))  # noqa: E731
    text_token = torch.cat([tok(prompt_text + text), torch.tensor([model.audio_start_token])])
    n = text_token.shape[0]
    P, D = model.patch_size, model.audio_vae.latent_dim
    tokens, feats, tmask, amask = [text_token], [torch.zeros(n, P, D)], [torch.ones(n)], [torch.zeros(n)]
    if ref_feat is not None:
        rt, rf, rtm, ram = model._make_ref_prefix(ref_feat, "cpu")
        tokens.insert(0, rt.long())
        feats.insert(0, rf)
        tmask.insert(0, rtm.float())
        amask.insert(0, ram.float())
    if prompt_feat is not None:
        m = prompt_feat.shape[0]
        tokens.append(torch.zeros(m, dtype=torch.long))
        feats.append(prompt_feat)
        tmask.append(torch.zeros(m))
        amask.append(torch.ones(m))
    return (torch.cat(tokens)[None], torch.cat(tmask)[None], torch.cat(feats)[None].float(),
            torch.cat(amask)[None])


def encode(model, wav: np.ndarray, padding_mode: str) -> torch.Tensor:
    """Upstream _encode_wav after its librosa.load: pad to a patch, VAE-encode, to [T, P, D]."""
    audio = torch.from_numpy(wav)[None]
    patch_len = model.patch_size * model.chunk_size
    if audio.size(1) % patch_len:
        pad = patch_len - audio.size(1) % patch_len
        audio = torch.nn.functional.pad(audio, (pad, 0) if padding_mode == "left" else (0, pad))
    feat = model.audio_vae.encode(audio, model._encode_sample_rate)
    return feat.view(model.audio_vae.latent_dim, -1, model.patch_size).permute(1, 2, 0)


def main() -> None:
    from transformers import LlamaTokenizerFast
    from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
    from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2

    TINY.mkdir(parents=True, exist_ok=True)
    vocab = tokenizer(TINY)
    cfg = config(vocab)
    torch.manual_seed(0)
    conf = VoxCPMConfig.model_validate(cfg)
    vae = AudioVAEV2(config=AudioVAEConfigV2(**cfg["audio_vae_config"]))
    model = VoxCPM2Model(conf, LlamaTokenizerFast.from_pretrained(str(TINY)), vae, device="cpu").float().eval()
    randomise(model)
    with torch.no_grad():
        model.stop_proj.bias.add_(-0.4)
    save_checkpoint(model, cfg)
    # reload as the published layout is read, so the goldens come from the files themselves
    model = VoxCPM2Model.from_local(str(TINY), optimize=False, device="cpu").float().eval()

    out: dict[str, np.ndarray] = {"text": np.array(TEXTS[0]), "prompt_text": np.array(PROMPT_TEXT)}
    for i, text in enumerate(TEXTS):
        out[f"ids_{i}"] = np.array(model.text_tokenizer(text), np.int64)

    rng = np.random.default_rng(3)
    ref_wav = (0.3 * rng.standard_normal(16000 * 2 // 100)).astype(np.float32)
    prompt_wav = (0.3 * rng.standard_normal(16000 * 12 // 1000)).astype(np.float32)
    out["ref_wav"], out["prompt_wav"] = ref_wav, prompt_wav
    with torch.inference_mode():
        ref_feat = encode(model, ref_wav, "right")
        prompt_feat = encode(model, prompt_wav, "left")
        out["ref_feat"], out["prompt_feat"] = ref_feat.numpy(), prompt_feat.numpy()

        modes = {"plain": dict(), "clone": dict(ref_feat=ref_feat),
                 "continuation": dict(prompt_text=PROMPT_TEXT, prompt_feat=prompt_feat),
                 "clone_continuation": dict(ref_feat=ref_feat, prompt_text=PROMPT_TEXT, prompt_feat=prompt_feat)}
        for mode, kw in modes.items():
            tt, tm, ff, fm = prompt(model, TEXTS[0], **kw)
            out[f"{mode}_tokens"], out[f"{mode}_text_mask"] = tt.numpy(), tm.numpy()
            out[f"{mode}_feat"], out[f"{mode}_feat_mask"] = ff.numpy(), fm.numpy()
            # prefill hidden: base LM (before FSQ) and residual LM over the whole prompt
            feat_embed = model.enc_to_lm_proj(model.feat_encoder(ff))
            text_embed = model.base_lm.embed_tokens(tt) * cfg["lm_config"]["scale_emb"]
            embed = tm[..., None] * text_embed + fm[..., None] * feat_embed
            enc, _ = model.base_lm(inputs_embeds=embed, is_causal=True)
            out[f"{mode}_feat_embed"] = feat_embed.numpy()
            out[f"{mode}_base_hidden"] = enc.numpy()
            enc = model.fsq_layer(enc) * fm[..., None] + enc * tm[..., None]
            fused = model.fusion_concat_proj(torch.cat((enc, fm[..., None] * feat_embed), -1))
            res, _ = model.residual_lm(inputs_embeds=fused, is_causal=True)
            out[f"{mode}_residual_hidden"] = res.numpy()
            noise = RecordedNoise()
            (latent, generated), stops = run_inference(model, tt, tm, ff, fm, noise)
            out[f"{mode}_noise"] = np.stack(noise.draws)
            out[f"{mode}_latent"], out[f"{mode}_patches"] = latent, generated
            out[f"{mode}_stop_logits"] = np.concatenate(stops)
            out[f"{mode}_audio"] = model.audio_vae.decode(torch.from_numpy(latent)).numpy()
        # streaming: upstream's stateful VAE decode, one chunk per patch, with the same noise
        tt, tm, ff, fm = (torch.from_numpy(out[f"plain_{k}"]) for k in ("tokens", "text_mask", "feat", "feat_mask"))
        noise = RecordedNoise()
        latents, _ = run_inference(model, tt, tm, ff, fm, noise, streaming=True)
        with model.audio_vae.streaming_decode() as dec:
            chunks = [dec.decode_chunk(torch.from_numpy(z)).numpy() for z in latents]
        out["stream_chunk_lengths"] = np.array([c.shape[-1] for c in chunks])
        out["stream_audio"] = np.concatenate(chunks, axis=-1)
    np.savez_compressed(OUT / "goldens.npz", **out)
    print({k: v.shape for k, v in out.items()})


if __name__ == "__main__":
    main()
