"""Goldens for the Qwen3-TTS speech-tokenizer DECODER (codes -> 24 kHz waveform).

Builds a tiny `Qwen3TTSTokenizerV2Model` (upstream qwen-tts 0.1.1 class, encoder half included
because the published speech_tokenizer/model.safetensors has it), re-initialises every tensor
deterministically, saves it with upstream `save_pretrained` (config.json + model.safetensors,
float32: the published layout) and records what upstream decodes.

Rerun (from the repository root; needs the throwaway reference venv, scripts/reference-venv.sh):

    REFVENV/bin/python scripts/goldens/qwen3_speech_decoder.py

Writes tests/fixtures/qwen3_tts/tokenizer/{config.json, model.safetensors, golden.npz}.

Structural features kept from the real config: 16 quantizers (1 semantic + 15 acoustic), head_dim
* heads != hidden_size, a sliding window (16) far shorter than the test lengths and with a
receptive field (3 layers * 15 = 45 frames) longer than the 24-frame re-prime context, as in
the real model (8 * 71 = 568), every upsampling stage at the real rates (2, 2 | 8, 5, 4, 3 ->
1920 samples per frame) with tiny channels. A zero `cluster_usage` row exercises the clamp.

golden.npz:
  codes_a [48,16] int64, wav_a [48*1920] f32     one-shot `model.decode` (full waveform)
  quant_a, pre_conv_a, transformer_a             intermediates for codes_a, channels-last
  codes_b [300,16], wav_b_strided [300*1920/8]   one-shot decode of 300 frames, every 8th sample
  codes_c [130,16] (last 3 frames -1), wav_c_strided (every 4th)   `model.decode`, padding trimmed
  codes_d [120,16], wav_d_strided (every 4th)    decoder.chunked_decode(chunk 50, left context 10)
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs  # noqa: F401  (must precede qwen_tts)

import torch
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
    Qwen3TTSTokenizerV2Config,
)
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
    Qwen3TTSTokenizerV2Model,
)

OUT_GAIN = 0.1
OUT = ROOT / "tests" / "fixtures" / "qwen3_tts" / "tokenizer"

DECODER = dict(
    attention_bias=False, attention_dropout=0.0, latent_dim=32, codebook_dim=16, codebook_size=32,
    decoder_dim=32, hidden_act="silu", hidden_size=32, intermediate_size=64,
    layer_scale_initial_scale=0.01, max_position_embeddings=8000, head_dim=16, num_attention_heads=4,
    num_hidden_layers=3, num_key_value_heads=4, num_quantizers=16, num_semantic_quantizers=1,
    rms_norm_eps=1e-5, rope_theta=10000, semantic_codebook_size=64, sliding_window=16,
    upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2], vector_quantization_hidden_dimension=16,
)
ENCODER = dict(
    _frame_rate=12.5, audio_channels=1, codebook_dim=16, codebook_size=32, compress=2,
    dilation_growth_rate=2, head_dim=8, hidden_act="gelu", hidden_size=32, intermediate_size=64,
    kernel_size=7, last_kernel_size=3, layer_scale_initial_scale=0.01, max_position_embeddings=8000,
    norm_eps=1e-5, normalize=False, num_attention_heads=4, num_filters=4, num_hidden_layers=2,
    num_key_value_heads=4, num_quantizers=20, num_residual_layers=1, num_semantic_quantizers=1,
    pad_mode="constant", residual_kernel_size=3, rope_theta=10000.0, sampling_rate=24000,
    sliding_window=12, trim_right_ratio=1.0, upsample_groups=32, upsampling_ratios=[8, 6, 5, 4],
    use_cache=False, use_causal_conv=True, use_conv_shortcut=False, use_streaming=False,
    vector_quantization_hidden_dimension=16,
)


def reinit(model: torch.nn.Module, seed: int = 1234) -> None:
    """Deterministic, non-degenerate weights: fan-in-scaled normals, norms near 1, live snakes."""
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std

    def uniform(shape, lo, hi):
        return lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float32)

    with torch.no_grad():
        saved = set(model.state_dict())                       # skips non-persistent buffers
        tensors = {n: t for n, t in [*model.named_parameters(), *model.named_buffers()] if n in saved}
        for name in sorted(tensors):
            t = tensors[name]
            leaf = name.rsplit(".", 1)[-1]
            if leaf in ("cluster_usage",):
                v = uniform(t.shape, 0.5, 2.0)
                v[-1] = 0.0                                   # clamp(min=1e-5) path
            elif leaf in ("embedding_sum", "embed_sum"):
                usage = tensors[name.rsplit(".", 1)[0] + ".cluster_usage"]
                v = normal(t.shape, 0.3)
                v[-1] *= 1e-5                                 # row whose usage is 0
                v = v * torch.clamp(usage, min=1e-5)[:, None]  # sorted order: usage already set
            elif leaf == "initialized":
                v = torch.ones_like(t)
            elif leaf in ("alpha", "beta"):                   # SnakeBeta, log space
                v = normal(t.shape, 0.3)
            elif leaf == "scale":                             # layer scale
                v = uniform(t.shape, 0.2, 0.6)
            elif leaf == "gamma":                             # ConvNeXt layer scale
                v = uniform(t.shape, 0.2, 0.6)
            elif "norm" in name and leaf == "weight":
                v = 1.0 + normal(t.shape, 0.1)
            elif leaf == "bias":
                v = normal(t.shape, 0.05)
            elif leaf == "weight":
                mod = model.get_submodule(name.rsplit(".", 1)[0])
                if isinstance(mod, torch.nn.ConvTranspose1d):
                    fan_in = t.shape[0] * t.shape[2] / mod.stride[0]
                elif t.dim() == 3:
                    fan_in = t.shape[1] * t.shape[2]
                else:
                    fan_in = t.shape[1]
                v = normal(t.shape, 1.0 / math.sqrt(fan_in))
            else:
                raise SystemExit(f"no init rule for {name} {tuple(t.shape)}")
            t.copy_(v.to(t.dtype))
        # trained residual units add little to their input; fan-in scaling alone would grow
        # the signal 1.4x per unit, and keep the waveform mostly inside the final clamp(-1, 1)
        for name, t in model.decoder.named_parameters():
            if name.endswith("conv2.conv.weight"):
                t.mul_(0.3)
        model.decoder.decoder[-1].conv.weight.mul_(OUT_GAIN)


def channels_last(t: torch.Tensor) -> np.ndarray:
    return t[0].transpose(0, 1).contiguous().numpy().astype(np.float32)


def main() -> None:
    torch.manual_seed(0)
    cfg = Qwen3TTSTokenizerV2Config(
        encoder_config=ENCODER, decoder_config=DECODER, encoder_valid_num_quantizers=16,
        input_sample_rate=24000, output_sample_rate=24000, decode_upsample_rate=1920,
        encode_downsample_rate=1920,
    )
    model = Qwen3TTSTokenizerV2Model(cfg).eval().float()
    reinit(model)
    OUT.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(OUT), safe_serialization=True)
    # upstream saves under the names we load; reload to decode from exactly the saved file
    model = Qwen3TTSTokenizerV2Model.from_pretrained(str(OUT)).eval().float()
    dec = model.decoder
    print("attention implementation:", dec.config._attn_implementation)

    rng = np.random.default_rng(7)
    Q, bins = DECODER["num_quantizers"], DECODER["codebook_size"]

    def codes(n):
        c = rng.integers(0, bins, size=(n, Q))
        c[n // 3, :] = bins - 1                               # the zero-usage row
        return c

    out = {}
    with torch.no_grad():
        a = codes(48)
        out["codes_a"] = a
        out["wav_a"] = model.decode(torch.from_numpy(a)[None]).audio_values[0].numpy()
        ct = torch.from_numpy(a)[None].transpose(1, 2)
        q = dec.quantizer.decode(ct)
        out["quant_a"] = channels_last(q)
        h = dec.pre_conv(q)
        out["pre_conv_a"] = channels_last(h)
        tr = dec.pre_transformer(inputs_embeds=h.transpose(1, 2)).last_hidden_state
        out["transformer_a"] = tr[0].numpy()

        b = codes(300)
        out["codes_b"] = b
        wb = model.decode(torch.from_numpy(b)[None]).audio_values[0].numpy()
        out["wav_b_strided"] = wb[::8]

        c = codes(130)
        c[-3:, :] = -1
        out["codes_c"] = c
        out["wav_c_strided"] = model.decode(torch.from_numpy(c)[None]).audio_values[0].numpy()[::4]

        d = codes(120)
        out["codes_d"] = d
        wd = dec.chunked_decode(torch.from_numpy(d)[None].transpose(1, 2), chunk_size=50,
                                left_context_size=10)[0, 0].numpy()
        out["wav_d_strided"] = wd[::4]

    for k, v in out.items():
        if v.dtype == np.float32:
            print(f"{k:16s} {str(v.shape):14s} std {v.std():.4f} max|.| {np.abs(v).max():.4f} "
                  f"clamped {(np.abs(v) >= 1).mean():.4f}")
    np.savez_compressed(OUT / "golden.npz", **out)
    print(json.dumps({p.name: p.stat().st_size for p in OUT.iterdir()}))


if __name__ == "__main__":
    main()
