"""Tiny Qwen3-TTS checkpoint + upstream goldens for the Core ML export tests (tests/coreml/).

Rerun (from the repo root, after scripts/reference-venv.sh has built /work/refvenv):

    /work/refvenv/bin/python scripts/goldens/qwen3_tts_coreml.py

Writes tests/fixtures/coreml/qwen3_tts_tiny/ in the published layout (config.json,
model.safetensors in bf16 with `talker.*` keys, speech_tokenizer/config.json and
speech_tokenizer/model.safetensors in f32) and tests/fixtures/coreml/goldens.npz, all from the
upstream `qwen_tts` 0.1.1 classes. The speech-tokenizer file holds only its `decoder.*` half
(the Core ML export never reads `encoder.*`; leaving the Mimi encoder out keeps the fixture small).
CustomVoice type, so there is no speaker encoder. The code predictor's hidden size differs from
the talker's so `small_to_mtp_projection` (the 1.7B layout) is exercised.
"""
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs  # noqa: E402

reference_stubs.install()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig  # noqa: E402
from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration  # noqa: E402
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (  # noqa: E402
    Qwen3TTSTokenizerV2DecoderConfig,
)
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Decoder  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "coreml"
CKPT = OUT / "qwen3_tts_tiny"

TALKER = dict(
    vocab_size=3072, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, hidden_act="silu", max_position_embeddings=32768, rms_norm_eps=1e-6,
    rope_theta=1000000, rope_scaling={"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default",
                                      "type": "default"},
    attention_bias=False, num_code_groups=16, text_vocab_size=256, text_hidden_size=16,
    codec_eos_token_id=2150, codec_think_id=2154, codec_nothink_id=2155, codec_think_bos_id=2156,
    codec_think_eos_id=2157, codec_pad_id=2148, codec_bos_id=2149,
    codec_language_id={"english": 2050, "chinese": 2055}, spk_id={"ryan": 3061}, spk_is_dialect={"ryan": False},
    code_predictor_config=dict(
        vocab_size=256, hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, rope_theta=1000000, rope_scaling=None, max_position_embeddings=65536,
        rms_norm_eps=1e-6, layer_types=["full_attention"] * 2, num_code_groups=16, attention_bias=False,
        hidden_act="silu"),
)
DECODER = dict(
    attention_bias=False, attention_dropout=0.0, latent_dim=16, codebook_dim=16, codebook_size=64,
    decoder_dim=16, hidden_act="silu", hidden_size=16, intermediate_size=32, layer_scale_initial_scale=0.01,
    max_position_embeddings=8000, head_dim=8, num_attention_heads=2, num_hidden_layers=2,
    num_key_value_heads=2, num_quantizers=16, num_semantic_quantizers=1, rms_norm_eps=1e-5,
    rope_theta=10000, semantic_codebook_size=64, sliding_window=4, upsample_rates=[8, 5, 4, 3],
    upsampling_ratios=[2, 2], vector_quantization_hidden_dimension=16,
)


def reinit(module: torch.nn.Module, seed: int):
    """Fan-in-scaled normals for matrices, values near 1 for norms/scales, valid codebook stats."""
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(module.state_dict().items()):
        if not p.is_floating_point():
            continue
        leaf = name.rsplit(".", 1)[-1]
        if "cluster_usage" in name:
            v = 0.5 + torch.rand(p.shape, generator=g) * 2.0
        elif "embedding_sum" in name:
            v = torch.randn(p.shape, generator=g)
        elif leaf in ("alpha", "beta"):
            v = 0.2 * torch.randn(p.shape, generator=g)
        elif leaf in ("scale", "gamma"):
            v = 0.3 + 0.1 * torch.randn(p.shape, generator=g)
        elif p.ndim == 1 and ("norm" in name or "layernorm" in name) and leaf == "weight":
            v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
        elif leaf == "bias":
            v = 0.05 * torch.randn(p.shape, generator=g)
        elif "embedding" in name:
            v = torch.randn(p.shape, generator=g)
        else:
            fan_in = math.prod(p.shape[1:]) if p.ndim > 1 else p.shape[0]
            if "upsample" in name and name.endswith(".0.conv.weight") or ".block.1.conv" in name:
                fan_in = p.shape[0] * p.shape[-1] / max(1, p.shape[-1] // 2)   # transposed conv: [in, out, k]
            v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
        p.copy_(v.to(p.dtype))


def main():
    torch.manual_seed(0)
    CKPT.mkdir(parents=True, exist_ok=True)
    (CKPT / "speech_tokenizer").mkdir(exist_ok=True)

    cfg = Qwen3TTSConfig(talker_config=TALKER, tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="0b6",
                         tts_model_type="custom_voice")
    model = Qwen3TTSForConditionalGeneration(cfg).float().eval()
    with torch.no_grad():
        reinit(model, 1)
        # Goldens use exactly the bf16 values that are saved.
        for p in model.state_dict().values():
            if p.is_floating_point():
                p.copy_(p.to(torch.bfloat16).float())
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(CKPT / "model.safetensors"), metadata={"format": "pt"})
    (CKPT / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, sort_keys=True) + "\n")

    talker = model.talker
    g = torch.Generator().manual_seed(2)
    n_pos = 12
    with torch.no_grad():
        embeds = torch.randn(1, n_pos, TALKER["hidden_size"], generator=g)
        out = talker.model(inputs_embeds=embeds, use_cache=False)
        hidden = out.last_hidden_state
        logits = talker.codec_head(hidden)

        cp = talker.code_predictor
        cp_in = torch.randn(1, 16, TALKER["hidden_size"], generator=g)
        cp_hidden = cp.model(inputs_embeds=cp.small_to_mtp_projection(cp_in), use_cache=False).last_hidden_state
        cp_logits = torch.stack([cp.lm_head[j](cp_hidden[0, j + 1]) for j in range(15)])

    dcfg = Qwen3TTSTokenizerV2DecoderConfig(**DECODER)
    dcfg._attn_implementation = "eager"
    dec = Qwen3TTSTokenizerV2Decoder(dcfg).float().eval()
    with torch.no_grad():
        reinit(dec, 3)
        # Keep the waveform mostly inside the final clamp, or the golden would test little.
        last = dec.decoder[-1].conv
        pre = dec.decoder[-1].conv.weight.clone()
        probe = torch.randint(0, DECODER["codebook_size"], (1, 16, 9), generator=torch.Generator().manual_seed(9))
        last.weight.zero_()
        last.bias.zero_()
        hook = {}
        last.register_forward_hook(lambda m, i, o: hook.setdefault("x", i[0]))
        dec(probe)
        last.weight.copy_(pre)
        rms = last(hook["x"]).pow(2).mean().sqrt()
        last.weight.mul_(0.3 / rms)
        last._forward_hooks.clear()
    save_file({f"decoder.{k}": v.contiguous() for k, v in dec.state_dict().items()},
              str(CKPT / "speech_tokenizer" / "model.safetensors"), metadata={"format": "pt"})
    tok_cfg = {"architectures": ["Qwen3TTSTokenizerV2Model"], "model_type": "qwen3_tts_tokenizer_12hz",
               "encoder_valid_num_quantizers": 16, "input_sample_rate": 24000, "output_sample_rate": 24000,
               "decode_upsample_rate": 1920, "encode_downsample_rate": 1920, "decoder_config": DECODER}
    (CKPT / "speech_tokenizer" / "config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")

    g = torch.Generator().manual_seed(4)
    codes = torch.randint(0, DECODER["codebook_size"], (1, 16, 9), generator=g)
    long_codes = torch.randint(0, DECODER["codebook_size"], (1, 16, 13), generator=g)
    with torch.no_grad():
        wav = dec(codes)
        wav_chunked = dec.chunked_decode(long_codes, chunk_size=6, left_context_size=3)

    np.savez_compressed(
        OUT / "goldens.npz",
        talker_embeds=embeds[0].numpy(), talker_hidden=hidden[0].numpy(), talker_logits=logits[0].numpy(),
        cp_inputs=cp_in[0].numpy(), cp_hidden=cp_hidden[0].numpy(), cp_logits=cp_logits.numpy(),
        decoder_codes=codes[0].numpy().astype(np.int32), decoder_wav=wav[0, 0].numpy(),
        decoder_long_codes=long_codes[0].numpy().astype(np.int32), decoder_chunked_wav=wav_chunked[0, 0].numpy(),
    )
    size = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {OUT} ({size / 1e6:.2f} MB); wav rms {wav.pow(2).mean().sqrt():.4f}, "
          f"logits std {logits.std():.3f}")


if __name__ == "__main__":
    main()
