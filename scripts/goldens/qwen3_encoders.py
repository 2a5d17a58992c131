"""Goldens for the Qwen3-TTS reference-audio encoders (speaker encoder + speech-tokenizer encoder).

Builds tiny models from the UPSTREAM classes (qwen-tts 0.1.1 / transformers 4.57.3), re-initialises
every tensor deterministically, saves them in the published layout, runs the upstream code on a
synthetic signal and stores the results:

  tests/fixtures/qwen3_tts/speaker_encoder/   config.json (speaker_encoder_config block), model.safetensors
                                              (`speaker_encoder.*`, bf16 as published), golden.npz
  tests/fixtures/qwen3_tts/tokenizer_enc/     speech_tokenizer layout: config.json, preprocessor_config.json,
                                              model.safetensors (`encoder.*` + a tiny `decoder.*`, f32), golden.npz

Rerun (from the repo root; needs the reference venv built by scripts/reference-venv.sh):

    REFVENV/bin/python scripts/goldens/qwen3_encoders.py

The speaker-encoder golden is computed in float32 from the bf16-rounded weights (our MLX code runs
float32 on upcast weights). The speech-encoder golden goes through the upstream wrapper
`Qwen3TTSTokenizer.from_pretrained(dir).encode(wav, sr=24000)`, i.e. feature extractor, Mimi encoder,
split RVQ and the cut to ceil(n / 1920) frames.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import reference_stubs

reference_stubs.install()

import torch
from safetensors.torch import load_file, save_file

from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSSpeakerEncoderConfig
from qwen_tts.core.models.modeling_qwen3_tts import (
    Qwen3TTSForConditionalGeneration,
    Qwen3TTSSpeakerEncoder,
)
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
    Qwen3TTSTokenizerV2Config,
)
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
    Qwen3TTSTokenizerV2Model,
)
from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer

FIX = REPO / "tests" / "fixtures" / "qwen3_tts"
SR = 24000

SPK_CFG = dict(
    mel_dim=128, enc_dim=24, enc_channels=[32, 32, 32, 32, 96], enc_kernel_sizes=[5, 3, 3, 3, 1],
    enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=16, enc_res2net_scale=8, enc_se_channels=8,
    sample_rate=SR,
)

# Real SEANet strides (1920 samples per frame) with tiny widths; a sliding window (12) much shorter
# than the test clip so that we learn whether upstream applies it; 20 quantizers so the cut to 16
# is exercised.
ENC_CFG = dict(
    _frame_rate=12.5, audio_channels=1, codebook_dim=16, codebook_size=64, compress=2,
    dilation_growth_rate=2, head_dim=8, hidden_act="gelu", hidden_size=32, intermediate_size=64,
    kernel_size=7, last_kernel_size=3, layer_scale_initial_scale=0.01, max_position_embeddings=8000,
    norm_eps=1e-05, normalize=False, num_attention_heads=4, num_filters=4, num_hidden_layers=2,
    num_key_value_heads=4, num_quantizers=20, num_residual_layers=1, num_semantic_quantizers=1,
    pad_mode="constant", residual_kernel_size=3, rope_theta=10000.0, sampling_rate=SR,
    sliding_window=12, trim_right_ratio=1.0, upsample_groups=32, upsampling_ratios=[8, 6, 5, 4],
    use_cache=False, use_causal_conv=True, use_conv_shortcut=False, use_streaming=False,
    vector_quantization_hidden_dimension=16,
)
DEC_CFG = dict(
    attention_bias=False, attention_dropout=0.0, latent_dim=16, codebook_dim=16, codebook_size=64,
    decoder_dim=32, hidden_act="silu", hidden_size=16, intermediate_size=32, layer_scale_initial_scale=0.01,
    max_position_embeddings=8000, head_dim=8, num_attention_heads=2, num_hidden_layers=1,
    num_key_value_heads=2, num_quantizers=16, num_semantic_quantizers=1, rms_norm_eps=1e-05,
    rope_theta=10000, semantic_codebook_size=64, sliding_window=72, upsample_rates=[8, 5, 4, 3],
    upsampling_ratios=[2, 2], vector_quantization_hidden_dimension=16,
)


def signal(n: int, seed: int) -> np.ndarray:
    """Speech-like test signal: a gliding harmonic tone with syllable-rate AM, a noise burst, silence."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SR
    f0 = 90 + 45 * (seed % 4) + 60 * np.sin(2 * np.pi * 0.7 * t) + 40 * t
    phase = 2 * np.pi * np.cumsum(f0) / SR
    voiced = sum((0.6 / k) * np.sin(k * phase + k) for k in range(1, 9))
    env = 0.5 * (1 + np.sin(2 * np.pi * 3.1 * t - 1.0)) ** 2 / 4
    x = 0.35 * voiced * env
    burst = (t > 0.9 * t[-1] / 2) & (t < 1.2 * t[-1] / 2)
    x[burst] += 0.2 * rng.standard_normal(burst.sum())
    x += 0.003 * rng.standard_normal(n)
    x[: n // 40] = 0.0
    return np.clip(x, -0.95, 0.95).astype(np.float32)


def reinit_conv_stack(module: torch.nn.Module, gen: torch.Generator, gain: float = 2.0) -> None:
    """Fan-in-scaled normals for every weight, small random biases."""
    for name, p in module.named_parameters():
        with torch.no_grad():
            if name.endswith("weight") and p.ndim >= 2:
                fan_in = p.shape[1] * (p.shape[2] if p.ndim == 3 else 1)
                p.copy_(torch.randn(p.shape, generator=gen) * math.sqrt(gain / fan_in))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


# ---------------------------------------------------------------- speaker encoder

def build_speaker_encoder() -> None:
    out = FIX / "speaker_encoder"
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    cfg = Qwen3TTSSpeakerEncoderConfig(**SPK_CFG)
    enc = Qwen3TTSSpeakerEncoder(cfg).eval()
    reinit_conv_stack(enc, gen)
    with torch.no_grad():
        # Log-mels carry a large common offset; zero-DC first-layer filters make the random net
        # respond to spectral shape, so different clips give clearly different embeddings.
        w = enc.blocks[0].conv.weight
        w.sub_(w.mean(dim=(1, 2), keepdim=True))
    # Published root weights are bf16: save them so, then compute the golden from the rounded values.
    state = {f"speaker_encoder.{k}": v.detach().to(torch.bfloat16).contiguous() for k, v in enc.state_dict().items()}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    loaded = load_file(str(out / "model.safetensors"))
    enc.load_state_dict({k[len("speaker_encoder."):]: v.float() for k, v in loaded.items()}, strict=True)
    config = {
        "architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts",
        "tts_model_type": "base", "tts_model_size": "0b6",
        "speaker_encoder_config": {k: v for k, v in SPK_CFG.items()},
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    class Host:  # the attributes extract_speaker_embedding reads from the full model
        speaker_encoder = enc
        device = torch.device("cpu")
        dtype = torch.float32

    arrays = {}
    for tag, n, seed in (("a", int(2.7 * SR) + 77, 1), ("b", int(0.9 * SR) + 5, 2)):
        wav = signal(n, seed)
        emb = Qwen3TTSForConditionalGeneration.extract_speaker_embedding(Host(), wav, SR)
        from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram

        mel = mel_spectrogram(torch.from_numpy(wav).unsqueeze(0), n_fft=1024, num_mels=128, sampling_rate=SR,
                              hop_size=256, win_size=1024, fmin=0, fmax=12000)
        arrays[f"wav_{tag}"] = wav
        arrays[f"mel_{tag}"] = mel[0].T.numpy().astype(np.float32)  # [frames, 128]
        arrays[f"emb_{tag}"] = emb.numpy().astype(np.float32)
        print(f"speaker {tag}: n={n} mel {tuple(arrays[f'mel_{tag}'].shape)} "
              f"emb std {emb.std():.3f} range [{emb.min():.3f}, {emb.max():.3f}]")
    np.savez_compressed(out / "golden.npz", **arrays)


# ---------------------------------------------------------------- speech-tokenizer encoder

@torch.no_grad()
def reinit_mimi(model: Qwen3TTSTokenizerV2Model, wav: np.ndarray, gen: torch.Generator) -> None:
    enc = model.encoder
    for name, p in enc.named_parameters():
        if name.startswith("quantizer."):
            continue
        if "layernorm" in name:
            p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn(p.shape, generator=gen))
        elif "layer_scale" in name:
            p.copy_(0.05 + 0.25 * torch.rand(p.shape, generator=gen))
        elif name.endswith("weight"):
            fan_in = p.shape[1] * (p.shape[2] if p.ndim == 3 else 1)
            # ELU nets: keep activations O(1) through the SEANet stack.
            p.copy_(torch.randn(p.shape, generator=gen) * math.sqrt(1.5 / fan_in))
        else:
            p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    for _, p in model.decoder.named_parameters():
        p.copy_(0.1 * torch.randn(p.shape, generator=gen))

    # Codebooks: drawn per level from the statistics of that level's actual residual on the test signal,
    # so that nearest-neighbour choices spread over the codebook instead of collapsing to one entry.
    x = torch.from_numpy(wav)[None, None]
    h = enc.encoder(x)
    h = enc.encoder_transformer(h.transpose(1, 2), return_dict=True)[0].transpose(1, 2)
    h = enc.downsample(h)
    for rvq in (enc.quantizer.semantic_residual_vector_quantizer, enc.quantizer.acoustic_residual_vector_quantizer):
        residual = rvq.input_proj(h)  # [1, D, T]
        for layer in rvq.layers:
            r = residual[0].T  # [T, D]
            mu, sd = r.mean(0), r.std(0) + 1e-3
            cb = layer.codebook
            k = cb.embed_sum.shape[0]
            embed = mu + sd * torch.randn((k, r.shape[1]), generator=gen)
            usage = 0.5 + 1.5 * torch.rand((k,), generator=gen)
            cb.embed_sum.copy_(embed * usage[:, None])
            cb.cluster_usage.copy_(usage)
            cb.initialized.fill_(1.0)
            cb._embed = None
            idx = layer.encode(residual)
            residual = residual - layer.decode(idx)


def build_speech_encoder() -> None:
    out = FIX / "tokenizer_enc"
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(4321)
    torch.manual_seed(0)
    cfg = Qwen3TTSTokenizerV2Config(encoder_config=ENC_CFG, decoder_config=DEC_CFG, encoder_valid_num_quantizers=16,
                                    input_sample_rate=SR, output_sample_rate=SR, decode_upsample_rate=1920,
                                    encode_downsample_rate=1920)
    model = Qwen3TTSTokenizerV2Model(cfg).eval()
    wav_a = signal(int(3.1 * SR) + 123, 3)  # not a multiple of 1920: exercises the causal extra padding
    reinit_mimi(model, wav_a, gen)
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "preprocessor_config.json").write_text(json.dumps({
        "chunk_length_s": None, "feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1,
        "overlap": None, "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
        "sampling_rate": SR}, indent=2) + "\n")

    tok = Qwen3TTSTokenizer.from_pretrained(str(out), dtype=torch.float32)
    arrays = {}
    for tag, wav in (("a", wav_a), ("b", signal(int(1.3 * SR) + 1000, 4)), ("c", signal(1920 * 7, 5))):
        codes = tok.encode(wav, sr=SR).audio_codes[0].numpy().astype(np.int32)  # [T, 16]
        arrays[f"wav_{tag}"] = wav
        arrays[f"codes_{tag}"] = codes
        # Distance margins of the upstream choices (to judge how robust exact equality is).
        print(f"codes {tag}: n={len(wav)} -> {codes.shape}, distinct per level "
              f"{[len(set(codes[:, q])) for q in range(codes.shape[1])]}")
    arrays.update(margin_report(tok.model, wav_a))
    np.savez_compressed(out / "golden.npz", **arrays)


@torch.no_grad()
def margin_report(model: Qwen3TTSTokenizerV2Model, wav: np.ndarray) -> dict:
    enc = model.encoder
    x = torch.from_numpy(wav)[None, None]
    h = enc.encoder(x)
    h = enc.encoder_transformer(h.transpose(1, 2), return_dict=True)[0].transpose(1, 2)
    h = enc.downsample(h)
    gaps = []
    for rvq, n in ((enc.quantizer.semantic_residual_vector_quantizer, 1),
                   (enc.quantizer.acoustic_residual_vector_quantizer, 15)):
        residual = rvq.input_proj(h)
        for layer in rvq.layers[:n]:
            d = torch.cdist(residual[0].T[None], layer.codebook.embed[None])[0]
            s = d.sort(dim=-1).values
            gaps.append(((s[:, 1] - s[:, 0]) / s[:, 0]).min().item())
            residual = residual - layer.decode(layer.encode(residual))
    print("min relative distance gap per level:", " ".join(f"{g:.1e}" for g in gaps))
    return {"hidden_a": h[0].T.numpy().astype(np.float32)}  # [T, hidden] before the quantizer


if __name__ == "__main__":
    torch.set_num_threads(1)
    build_speaker_encoder()
    build_speech_encoder()
    for d in ("speaker_encoder", "tokenizer_enc"):
        size = sum(f.stat().st_size for f in (FIX / d).iterdir())
        print(f"{d}: {size / 1e6:.2f} MB")
