"""Tiny Breeze TTS 2 checkpoint in the published layout + goldens from the upstream code.

Rerun (from the repo root, with the reference venv of scripts/goldens/README.md):

    BREEZE_UPSTREAM=/tmp/breeze_ref REFVENV/bin/python scripts/goldens/breeze_tiny.py

``BREEZE_UPSTREAM`` is a folder holding the upstream breeze-tts inference code, which is not a
package on any index: ``t5gemma2_compat.py`` (upstream models/t5gemma2_compat.py), ``breeze_min.py``
(the inference path of models/breeze.py, breeze_backbone_factory.py and generation_breeze.py on the
transformers 4.57.3 Qwen3 / Llama classes upstream instantiates) and ``templates.py``
(breeze_infer/templates.py). It is never part of this repository.

Writes ``tests/fixtures/breeze/tiny/`` exactly as BreezeBlue/Breeze-TTS-2 is laid out: config.json
(nested backbone / depth-decoder / text-encoder / codec configs, the decoy top-level RoPE and eps
fields), generation_config.json, model.safetensors.index.json + 2 bf16 shards (no tied
``backbone_model.embed_tokens.embed_audio_tokens.weight``; the unused ``embed_text_tokens`` and a
leftover ``codec_model.*`` Mimi included), a Gemma-style tokenizer.json (byte-fallback BPE, the
special tokens at the end of the vocabulary as in the real one) + tokenizer_config.json, and
audio_tokenizer/ (a tiny Qwen3-TTS 12 Hz tokenizer with the real 2048-entry codebooks). Widths
shrink; the behaviour switches stay: 16 codebooks, vocab 2051 (2048 codes + 3 reserved, the EOS
class at 2051), llama3 depth RoPE with original_max_position_embeddings 16, sliding and full text
layers with their two RoPEs and a sliding window (4) shorter than the segments, the eoi
embedding, query_pre_attn_scalar != head_dim.

``tests/fixtures/breeze/tiny.goldens.npz`` + ``tiny.cases.json``: for each mode (plain, design,
clone, direction) with and without CFG, the token ids of each branch, each text segment's encoder
output, the full prompt embeddings, the prefill hidden state and logits, and 20 greedy frames
(all 16 codes) with the backbone and depth logits of each frame, run with the EOS row of lm_head
zeroed (as the tests do); and an EOS case on the saved checkpoint whose EOS row is scaled so the
backbone stops after a few frames.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "scripts" / "goldens"))
import reference_stubs  # noqa: F401

import torch
from safetensors.torch import save_file

UPSTREAM = os.environ.get("BREEZE_UPSTREAM")
if not UPSTREAM:
    raise SystemExit("set BREEZE_UPSTREAM to the folder with the upstream breeze-tts reference code")
sys.path.insert(0, UPSTREAM)
import breeze_min
import templates as tpl
from breeze_min import Breeze

_mask_fn = breeze_min.create_causal_mask
_masks: dict = {}


def _memo_mask(**kw):
    """transformers 4.57.3 builds each causal mask through vmap (~0.2 s on this CPU per call):
    reuse the mask it built for the same query length, cache length and dtype."""
    past = kw["past_key_values"].get_seq_length() if kw.get("past_key_values") is not None else 0
    key = (kw["input_embeds"].shape[1], past, kw["input_embeds"].dtype, kw["config"].model_type)
    if key not in _masks:
        _masks[key] = _mask_fn(**kw)
    return _masks[key]


breeze_min.create_causal_mask = _memo_mask

OUT = ROOT / "tests" / "fixtures" / "breeze" / "tiny"
FRAMES = 20

# ---------------------------------------------------------------- tiny Gemma-style tokenizer
CHARS = ("▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'()[]-:;\""
         "你好世界笑咳嗽清嗓子叹气今天很开心")
SPECIAL_TAIL = ["<|AUDIO|>", "<|audio_eos|>"] + [f"[S{i}]" for i in range(10)] + ["<ins_bos>", "<ins_eos>"]


def build_tokenizer() -> tuple[dict, int, int]:
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, processors
    from tokenizers.models import BPE

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for c in CHARS:
        vocab.setdefault(c, len(vocab))
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("l", "l"), ("o", "▁")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    eoi = len(vocab)
    vocab["<end_of_image>"] = eoi
    for t in SPECIAL_TAIL:
        vocab[t] = len(vocab)
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<pad>", "<eos>", "<bos>", "<unk>", "<end_of_image>", *SPECIAL_TAIL]])
    OUT.mkdir(parents=True, exist_ok=True)
    tok.save(str(OUT / "tokenizer.json"))
    (OUT / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GemmaTokenizerFast", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
        "model_max_length": 1000000000000000019884624838656}, indent=2) + "\n")
    return vocab, eoi, len(vocab)


def hf_tokenizer():
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(OUT / "tokenizer.json"), bos_token="<bos>",
                                   eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")


# ---------------------------------------------------------------- tiny config (published layout)
def build_config(text_vocab: int, eoi: int) -> dict:
    audio = text_vocab - len(SPECIAL_TAIL)
    return {
        "architectures": ["BreezeForConditionalGeneration"], "model_type": "breeze",
        "backbone_model_type": "qwen3", "num_codebooks": 16, "vocab_size": 2051, "hidden_size": 32,
        "audio_embed_size": 32, "text_vocab_size": text_vocab, "audio_token_id": audio,
        "audio_eos_token_id": audio + 1, "codebook_pad_token_id": 2050, "codebook_eos_token_id": 0,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "tie_codebooks_embeddings": True,
        "text_encoder_proj_type": "linear", "torch_dtype": "bfloat16", "transformers_version": "4.57.3",
        # decoys: the backbone reads backbone_config only
        "rope_theta": 500000, "rms_norm_eps": 1e-5, "max_position_embeddings": 2048,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 1024},
        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
        "head_dim": 64, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "backbone_config": {
            "model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48, "hidden_act": "silu",
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False,
            "sliding_window": None, "use_sliding_window": False, "max_position_embeddings": 40960,
            "vocab_size": 151936, "tie_word_embeddings": False},
        "depth_decoder_config": {
            "model_type": "breeze_depth_decoder_model", "num_hidden_layers": 2, "hidden_size": 32,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 64,
            "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500000,
            "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 0.001953125,
                             "high_freq_factor": 0.0078125, "original_max_position_embeddings": 16},
            "max_position_embeddings": 33, "vocab_size": 2051, "num_codebooks": 16,
            "backbone_hidden_size": 32, "audio_embed_size": 32, "attention_bias": False, "mlp_bias": False},
        "text_encoder_config": {
            "model_type": "t5gemma2_text", "num_hidden_layers": 4, "hidden_size": 24, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 40,
            "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 20,
            "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0}},
            "attn_logit_softcapping": None, "final_logit_softcapping": None, "vocab_size": text_vocab,
            "eoi_token_index": eoi, "dropout_rate": 0.0, "attention_dropout": 0.0, "attention_bias": False,
            "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1, "max_position_embeddings": 131072,
            "preferred_attn_implementation": "flash_attention_2"},
        "codec_config": {"model_type": "mimi", "codebook_size": 2048, "sampling_rate": 24000, "_frame_rate": 12.5,
                         "hidden_size": 16, "num_filters": 4, "num_residual_layers": 1,
                         "upsampling_ratios": [8, 6, 5, 4],
                         "codebook_dim": 8, "num_quantizers": 2, "num_semantic_quantizers": 1,
                         "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8,
                         "intermediate_size": 32, "vector_quantization_hidden_dimension": 8,
                         "upsample_groups": 16},
    }


GENERATION = {"temperature": 0.9, "depth_decoder_temperature": 0.9, "max_new_tokens": 750,
              "transformers_version": "4.57.3"}


# ---------------------------------------------------------------- deterministic weights
def reinit(model: torch.nn.Module, seed: int = 7) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in sorted(model.state_dict(keep_vars=True).items()):
            if name == "backbone_model.embed_tokens.embed_audio_tokens.weight":
                continue  # tied to the depth decoder's table
            leaf = name.rsplit(".", 1)[-1]
            if name.startswith("text_encoder") and ("norm" in name or "layernorm" in name):
                v = torch.randn(t.shape, generator=g) * 0.15       # Gemma (1 + w) norms: w near 0
            elif "norm" in name or "layernorm" in name:
                v = 1.0 + torch.randn(t.shape, generator=g) * 0.1
            elif leaf == "eoi_embedding":
                v = torch.randn(t.shape, generator=g) * 0.5
            elif name == "depth_decoder.codebooks_head.weight":     # [15, in, out]
                v = torch.randn(t.shape, generator=g) / math.sqrt(t.shape[1])
            elif "embed" in name and t.dim() == 2:
                v = torch.randn(t.shape, generator=g) * (0.3 if name.startswith("text_encoder") else 0.5)
            elif t.dim() >= 2:
                fan_in = int(np.prod(t.shape[1:]))
                v = torch.randn(t.shape, generator=g) / math.sqrt(fan_in)
            else:
                v = torch.randn(t.shape, generator=g) * 0.05
            t.copy_(v.to(t.dtype))
        # the codec leftover carries whatever upstream's init leaves; only its names matter


def codec_leftover(cfg: dict) -> dict[str, torch.Tensor]:
    from transformers import MimiConfig, MimiModel

    c = {k: v for k, v in cfg["codec_config"].items() if k not in ("model_type", "_frame_rate")}
    torch.manual_seed(3)
    return {"codec_model." + k: v.detach().clone() for k, v in MimiModel(MimiConfig(**c)).state_dict().items()}


def save_sharded(model: Breeze, cfg: dict) -> None:
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
             if k != "backbone_model.embed_tokens.embed_audio_tokens.weight"}
    state.update({k: v.to(torch.bfloat16).contiguous() for k, v in codec_leftover(cfg).items()})
    names = sorted(state)
    first = [n for n in names if n.startswith(("backbone_model", "codec_model", "embed_text_tokens", "lm_head"))]
    second = [n for n in names if n not in first]
    shards = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second}
    weight_map, total = {}, 0
    for fname, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(OUT / fname), metadata={"format": "pt"})
        for k in keys:
            weight_map[k] = fname
            total += state[k].numel() * 2
    (OUT / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, indent=2) + "\n")


def build_audio_tokenizer() -> None:
    from qwen3_speech_decoder import DECODER, ENCODER, reinit as reinit_codec
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    torch.manual_seed(0)
    cfg = Qwen3TTSTokenizerV2Config(
        encoder_config={**ENCODER, "codebook_size": 2048}, decoder_config={**DECODER, "codebook_size": 2048},
        encoder_valid_num_quantizers=16, input_sample_rate=24000, output_sample_rate=24000,
        decode_upsample_rate=1920, encode_downsample_rate=1920)
    model = Qwen3TTSTokenizerV2Model(cfg).eval().float()
    reinit_codec(model, seed=99)
    model.save_pretrained(str(OUT / "audio_tokenizer"), safe_serialization=True)


# ---------------------------------------------------------------- cases
REF_CODES = torch.tensor(np.random.default_rng(5).integers(0, 2048, size=(6, 16)), dtype=torch.long)
BASE = {"text": "Hello the world (laugh) 你好[笑]!", "instruction": "calm low voice, slow",
        "ref_text": "Today is a good day.", "speaker": "S0"}
CASES = [  # name, template, cfg_scale
    ("plain", "tts_plain", 1.0), ("design", "tts_instruction", 1.0), ("design_cfg", "tts_instruction", 3.0),
    ("clone", "ref_clone_tata", 1.0), ("direction", "ref_edit_tata", 1.0),
    ("direction_cfg", "ref_edit_tata", 2.5), ("design_cfg0", "tts_instruction", 0.0),
]


def segments_of(prep: dict) -> list[list[int]]:
    ids = prep["input_ids"][0][prep["text_ids_mask"][0]].tolist()
    out, at = [], 0
    for n in prep["text_ids_len"].tolist():
        out.append(ids[at:at + n])
        at += n
    return out


def main() -> None:
    _, eoi, text_vocab = build_tokenizer()
    cfg = build_config(text_vocab, eoi)
    (OUT / "config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    (OUT / "generation_config.json").write_text(json.dumps(GENERATION, indent=2) + "\n")
    torch.manual_seed(0)
    model = Breeze(cfg).eval()
    reinit(model)
    with torch.no_grad():  # compute from exactly the bf16 values saved
        for _, t in model.state_dict(keep_vars=True).items():
            t.copy_(t.to(torch.bfloat16).float())
    save_sharded(model, cfg)
    build_audio_tokenizer()
    tok = hf_tokenizer()

    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"frames": FRAMES, "request": BASE, "cases": {}}
    arrays["ref_codes"] = REF_CODES.numpy().astype(np.int32)
    with torch.no_grad():
        model.lm_head.weight[cfg["vocab_size"]] = 0.0
        for name, template, scale in CASES:
            req = {**BASE, "ref_codes": REF_CODES}
            prep = tpl.prepare(tok, req, template, scale)
            case = {"template": template, "cfg_scale": scale, "branches": {}}
            branches = {}
            for br, p in prep.items():
                emb, enc, _ = model.merge(p["input_ids"], p["input_values"], p["text_ids_mask"], p["text_ids_len"])
                segs = segments_of(p)
                case["branches"][br] = {"input_ids": p["input_ids"][0].tolist(), "segments": segs}
                arrays[f"{name}.{br}.embeds"] = emb[0].numpy()
                for i, e in enumerate(enc):
                    arrays[f"{name}.{br}.segment{i}"] = e.numpy()
                branches[br] = emb
                from transformers.cache_utils import DynamicCache

                h = model.backbone_model(emb, DynamicCache())
                arrays[f"{name}.{br}.prefill_hidden"] = h[0, -1].numpy()
                arrays[f"{name}.{br}.prefill_logits"] = model.lm_head(h[0, -1]).float().numpy()
            codes, rec = model.generate_greedy(branches["cond"], branches.get("uncond"), scale, FRAMES)
            assert len(codes) == FRAMES, (name, len(codes))
            arrays[f"{name}.codes"] = torch.stack(codes).numpy().astype(np.int32)
            arrays[f"{name}.backbone_logits"] = torch.stack(rec["backbone_logits"]).numpy()
            arrays[f"{name}.depth_logits"] = torch.stack(rec["depth_logits"][:3]).numpy()   # frames 0..2
            meta["cases"][name] = case
        # plain mode with CFG has no negative branch: upstream raises
        try:
            tpl.prepare(tok, {**BASE}, "tts_plain", 2.0)
            raise SystemExit("expected upstream to refuse CFG without a negative prompt")
        except ValueError as e:
            meta["cfg_error"] = str(e)

        # EOS: the saved EOS row points along the backbone state of frame N (greedy, plain), sized
        # so that the EOS class wins there and nowhere before; the frames before N are unchanged
        prep = tpl.prepare(tok, {**BASE}, "tts_plain", 1.0)["cond"]
        emb, _, _ = model.merge(prep["input_ids"], None, prep["text_ids_mask"], prep["text_ids_len"])
        _, rec = model.generate_greedy(emb, None, 1.0, 12)
        hs, best = rec["h_cond"], rec["best"]
        for n in range(4, 12):
            beta = (best[n] + 1.0) / float(hs[n] @ hs[n])
            if all(beta * float(hs[n] @ hs[t]) < best[t] - 0.5 for t in range(n)):
                break
        else:
            raise SystemExit("could not place the EOS row")
        model.lm_head.weight[cfg["vocab_size"]] = (beta * hs[n]).to(torch.bfloat16).float()
        codes, _ = model.generate_greedy(emb, None, 1.0, 40)
        assert len(codes) == n, (len(codes), n)
        eos_state = {"lm_head.weight": model.lm_head.weight.detach().to(torch.bfloat16).contiguous()}
        # the saved checkpoint carries this EOS row (shard 1 holds lm_head)
        from safetensors.torch import load_file

        shard = OUT / "model-00001-of-00002.safetensors"
        st = load_file(str(shard))
        st.update(eos_state)
        save_file(st, str(shard), metadata={"format": "pt"})
        arrays["eos.codes"] = torch.stack(codes).numpy().astype(np.int32)
        meta["eos_frames"] = len(codes)
    np.savez_compressed(OUT.parent / "tiny.goldens.npz", **arrays)
    (OUT.parent / "tiny.cases.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps({p.name: p.stat().st_size for p in OUT.rglob("*") if p.is_file()}, indent=0))
    print("eos after", meta["eos_frames"], "frames; goldens", (OUT.parent / "tiny.goldens.npz").stat().st_size)


def write_parity(name: str = "direction_cfg") -> None:
    """tests/fixtures/breeze/parity-direction-cfg.npz for `ttscli parity breeze-tts-2 --golden`:
    one case of the goldens above in the format of docs/parity.md."""
    a = np.load(OUT.parent / "tiny.goldens.npz")
    meta = json.loads((OUT.parent / "tiny.cases.json").read_text(encoding="utf-8"))
    case, req = meta["cases"][name], meta["request"]
    out = {"text": np.array(req["text"]), "cfg_scale": np.array(case["cfg_scale"]), "zero_eos_row": np.array(1.0),
           "embeds": a[f"{name}.cond.embeds"], "prefill_hidden": a[f"{name}.cond.prefill_hidden"],
           "prefill_logits": a[f"{name}.cond.prefill_logits"], "codes": a[f"{name}.codes"],
           "backbone_logits": a[f"{name}.backbone_logits"]}
    if case["template"] in ("tts_instruction", "ref_edit_tata"):
        out["instruction"] = np.array(req["instruction"])
    if case["template"].startswith("ref_"):
        out.update(ref_text=np.array(req["ref_text"]), ref_codes=a["ref_codes"])
    if f"{name}.uncond.embeds" in a:
        out["uncond_embeds"] = a[f"{name}.uncond.embeds"]
    np.savez_compressed(OUT.parent / "parity-direction-cfg.npz", **out)


if __name__ == "__main__":
    if "--parity-only" not in sys.argv:
        main()
    write_parity()
