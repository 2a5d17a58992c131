"""Tiny Qwen3-TTS checkpoints (talker side) + goldens from the upstream reference (qwen-tts 0.1.1).

Rerun (from the repo root; needs the reference venv built by scripts/reference-venv.sh):

    REFVENV/bin/python scripts/goldens/qwen3_talker.py

Writes, for each of tiny-base (0.6B-like: talker width == code-predictor width, with a
speaker encoder), tiny-customvoice (1.7B-like: talker 64 != predictor 32, so
``small_to_mtp_projection`` exists; 3 speakers incl. a dialect one) and tiny-voicedesign:

    tests/fixtures/qwen3_tts/<name>/   config.json generation_config.json model.safetensors (bf16)
                                       vocab.json merges.txt tokenizer_config.json preprocessor_config.json
    tests/fixtures/qwen3_tts/<name>.goldens.npz   + <name>.cases.json (the inputs of each case)

Models are built from the upstream classes, re-initialised deterministically, rounded to bf16,
saved with ``save_pretrained`` and then run in float32 (eager attention).  Each case runs the
upstream wrapper method (generate_voice_clone / generate_custom_voice / generate_voice_design)
with the speech-tokenizer decode replaced by a recorder; the talker prompt is captured at
``model.talker.generate``.  Greedy runs (do_sample=False for talker and sub-talker, default
repetition penalty 1.05) use the checkpoint with its EOS row of ``codec_head`` zeroed, so
they always run to max frames; the EOS case uses the saved (un-zeroed) row, which is crafted
to fire after the first few frames.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import reference_stubs  # noqa: F401

import torch
from transformers import AutoConfig, AutoProcessor

from qwen_tts.core.models import (
    Qwen3TTSConfig,
    Qwen3TTSForConditionalGeneration,
    Qwen3TTSProcessor,
)
from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel, VoiceClonePromptItem

OUT = ROOT / "tests" / "fixtures" / "qwen3_tts"
GREEDY_FRAMES = 20

# ---------------------------------------------------------------- tiny byte-level BPE tokenizer

SPECIALS = {  # content -> (id, special) ; same names/flags as the published tokenizer_config.json
    "<|endoftext|>": (300, True), "<|im_start|>": (301, True), "<|im_end|>": (302, True),
    "<|audio_start|>": (303, True), "<|audio_end|>": (304, True), "<tts_pad>": (305, True),
    "<tts_text_bos>": (306, True), "<tts_text_eod>": (307, True), "<tts_text_bos_single>": (308, True),
    "<|audio_pad|>": (309, True), "<think>": (310, False), "</think>": (311, False),
}
TEXT_VOCAB = 320
WORDS = ["assistant", "user", "Hello", "Ġworld", "Ġthe", "Ġvoice", "Ġcalm", "Ġspeak", "in", "er", "Ġ."]


def bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def write_tokenizer(d: Path) -> None:
    chars = bytes_to_unicode()
    vocab = {chars[b]: i for i, b in enumerate(sorted(chars))}
    merges: list[tuple[str, str]] = []
    for w in WORDS:
        for i in range(2, len(w) + 1):
            a, b = w[: i - 1], w[i - 1]
            if w[:i] not in vocab:
                merges.append((a, b))
                vocab[w[:i]] = len(vocab)
    assert len(vocab) < 300, len(vocab)
    # Specials must follow the vocab contiguously (as in the published 151643 + added tokens),
    # otherwise the fast tokenizer renumbers them: pad with unreachable filler entries.
    n = 2
    while len(vocab) < 300:
        vocab["Ġ" * n] = len(vocab)
        n += 1
    (d / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (d / "merges.txt").write_text("".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    added = {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": sp} for c, (i, sp) in SPECIALS.items()}
    cfg = {
        "add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
        "additional_special_tokens": [c for c, (_, sp) in SPECIALS.items()
                                      if sp and c not in ("<|endoftext|>", "<tts_text_eod>")],
        "bos_token": None, "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
        "errors": "replace", "model_max_length": 131072, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
        "audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>",
    }
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False), encoding="utf-8")
    (d / "preprocessor_config.json").write_text(json.dumps(
        {"padding_side": "left", "padding_value": 0.0, "processor_class": "Qwen3TTSProcessor",
         "return_attention_mask": True}, indent=2))


GEN_CONFIG = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
              "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0,
              "subtalker_top_k": 50, "max_new_tokens": 8192}

# ---------------------------------------------------------------- tiny configs (published field set)

LANGS = {"chinese": 2055, "english": 2050, "german": 2053, "italian": 2070, "portuguese": 2071,
         "spanish": 2054, "japanese": 2058, "korean": 2064, "french": 2061, "russian": 2069}


def make_config(kind: str) -> dict:
    big = kind != "base"
    hidden = 64 if big else 32
    cp = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=1000000,
              rms_norm_eps=1e-6, num_code_groups=16, attention_bias=False, rope_scaling=None,
              layer_types=["full_attention"] * 2, max_position_embeddings=65536, hidden_act="silu",
              use_sliding_window=False, sliding_window=None, max_window_layers=28)
    talker = dict(
        hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=3072, text_vocab_size=TEXT_VOCAB, text_hidden_size=32,
        rope_theta=1000000,
        rope_scaling={"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default", "type": "default"},
        rms_norm_eps=1e-6, attention_bias=False, attention_dropout=0, num_code_groups=16, hidden_act="silu",
        max_position_embeddings=32768, position_id_per_seconds=13, sliding_window=None, use_sliding_window=False,
        code_predictor_config=cp, codec_eos_token_id=2150, codec_pad_id=2148, codec_bos_id=2149,
        codec_think_id=2154, codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
        codec_language_id=dict(LANGS), spk_id={}, spk_is_dialect={})
    if kind == "custom_voice":
        talker["codec_language_id"].update(beijing_dialect=2074, sichuan_dialect=2062)
        talker["spk_id"] = {"serena": 3066, "ryan": 3061, "eric": 2875}
        talker["spk_is_dialect"] = {"serena": False, "ryan": False, "eric": "sichuan_dialect"}
    cfg = dict(architectures=["Qwen3TTSForConditionalGeneration"], model_type="qwen3_tts",
               tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="1b7" if big else "0b6",
               tts_model_type=kind, assistant_token_id=77091,
               im_start_token_id=SPECIALS["<|im_start|>"][0], im_end_token_id=SPECIALS["<|im_end|>"][0],
               tts_pad_token_id=SPECIALS["<tts_pad>"][0], tts_bos_token_id=SPECIALS["<tts_text_bos>"][0],
               tts_eos_token_id=SPECIALS["<tts_text_eod>"][0], talker_config=talker)
    if kind == "base":
        cfg["speaker_encoder_config"] = dict(enc_dim=hidden, sample_rate=24000, mel_dim=128,
                                             enc_channels=[32, 32, 32, 32, 96], enc_kernel_sizes=[5, 3, 3, 3, 1],
                                             enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=16,
                                             enc_res2net_scale=4, enc_se_channels=16)
    return cfg


# ---------------------------------------------------------------- deterministic re-init

def reinit(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or "layernorm" in name:
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith(".bias"):
                v = 0.05 * torch.randn(p.shape, generator=g)
            elif "embedding" in name and p.dim() == 2:
                v = 0.5 * torch.randn(p.shape, generator=g)
            else:
                fan_in = int(np.prod(p.shape[1:])) if p.dim() > 1 else p.shape[0]
                v = torch.randn(p.shape, generator=g) / np.sqrt(fan_in)
            # round to bf16 now, so the float32 goldens use exactly the weights saved on disk
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


class RecordingDecoder:
    """Stands in for the speech tokenizer: records the codes the wrapper asks it to decode."""

    def __init__(self):
        self.codes = []

    def decode(self, items):
        self.codes = [it["audio_codes"].cpu().numpy() for it in items]
        return [np.zeros(4, np.float32) for _ in items], 24000


def build(name: str, kind: str, seed: int):
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    for f in d.iterdir():
        f.unlink()
    cfg = make_config(kind)
    config = Qwen3TTSConfig(**copy.deepcopy(cfg))
    config._attn_implementation = "eager"
    config.talker_config._attn_implementation = "eager"
    config.talker_config.code_predictor_config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3TTSForConditionalGeneration(config).eval()
    reinit(model, seed)
    write_tokenizer(d)
    return d, cfg, model


def save(d: Path, model, cfg: dict) -> None:
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    model.to(torch.float32)
    # The cast rounded the RoPE inv_freq buffers to bf16 too: restore the float32 originals.
    for mod in model.modules():
        if hasattr(mod, "original_inv_freq"):
            assert mod.original_inv_freq.dtype == torch.float32
            mod.inv_freq = mod.original_inv_freq.clone()
    # save_pretrained writes sub-config fields (e.g. speaker_encoder_config.model_type) that the
    # upstream config class cannot read back; the published config.json has the plain layout.
    (d / "config.json").write_text(json.dumps(dict(cfg, transformers_version="4.57.3"), indent=2))
    (d / "generation_config.json").write_text(json.dumps(GEN_CONFIG, indent=2))
    write_tokenizer(d)


def load_wrapper(d: Path, model) -> Qwen3TTSModel:
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig, exist_ok=True)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor, exist_ok=True)
    processor = AutoProcessor.from_pretrained(str(d), fix_mistral_regex=True)
    model.load_speech_tokenizer(RecordingDecoder())
    return Qwen3TTSModel(model=model, processor=processor, generate_defaults=dict(GEN_CONFIG))


def run_case(w: Qwen3TTSModel, case: dict, greedy_frames: int | None) -> dict:
    """Run one wrapper call; returns the captured prompt (+ codes when greedy_frames is set)."""
    model = w.model
    captured = {}
    orig = model.talker.generate

    def spy(**kw):
        captured["prefill"] = kw["inputs_embeds"][0].float().numpy().copy()
        captured["trailing"] = kw["trailing_text_hidden"][0].float().numpy().copy()
        captured["tts_pad"] = kw["tts_pad_embed"].reshape(-1).float().numpy().copy()
        return orig(**kw)

    tok_calls = []
    orig_tok = w._tokenize_texts

    def tok_spy(texts):
        out = orig_tok(texts)
        tok_calls.extend((t, o[0].numpy().copy()) for t, o in zip(texts, out))
        return out

    model.talker.generate = spy
    w._tokenize_texts = tok_spy
    kw = dict(do_sample=False, subtalker_dosample=False,
              max_new_tokens=(greedy_frames + 1) if greedy_frames else 3)
    if "non_streaming" in case:
        kw["non_streaming_mode"] = case["non_streaming"]
    try:
        if case["mode"] == "clone":
            item = VoiceClonePromptItem(
                ref_code=None if case["x_vector_only"] else torch.tensor(case["ref_code"]),
                ref_spk_embedding=torch.tensor(case["x_vector"], dtype=torch.float32),
                x_vector_only_mode=case["x_vector_only"], icl_mode=not case["x_vector_only"],
                ref_text=case.get("ref_text"))
            w.generate_voice_clone(text=case["text"], language=case["language"], voice_clone_prompt=[item], **kw)
        elif case["mode"] == "custom_voice":
            w.generate_custom_voice(text=case["text"], speaker=case["speaker"], language=case["language"],
                                    instruct=case.get("instruct"), **kw)
        else:
            w.generate_voice_design(text=case["text"], instruct=case["instruct"], language=case["language"], **kw)
    finally:
        model.talker.generate = orig
        w._tokenize_texts = orig_tok
    captured["tokenized"] = tok_calls
    codes = model.speech_tokenizer.codes[0]
    if case["mode"] == "clone" and not case["x_vector_only"]:
        codes = codes[len(case["ref_code"]):]
    captured["codes"] = codes
    return captured


@torch.no_grad()
def talker_prefill(model, prefill: np.ndarray):
    emb = torch.tensor(prefill)[None]
    out = model.talker(inputs_embeds=emb, attention_mask=torch.ones(1, emb.shape[1], dtype=torch.long),
                       use_cache=False)
    return out.logits[0, -1].float().numpy(), out.past_hidden[0, -1].float().numpy()


def zero_eos(model) -> None:
    eos = model.config.talker_config.codec_eos_token_id
    with torch.no_grad():
        model.talker.codec_head.weight[eos] = 0


def record(name: str, kind: str, seed: int, cases: dict[str, dict], greedy: list[str],
           prefill_case: str, eos_case: str | None) -> None:
    d, cfg, model = build(name, kind, seed)
    rng = np.random.default_rng(seed)
    hidden = cfg["talker_config"]["hidden_size"]
    cpv = cfg["talker_config"]["code_predictor_config"]["vocab_size"]
    for c in cases.values():
        if c["mode"] == "clone":
            c["x_vector"] = (rng.standard_normal(hidden) * 0.5).astype(np.float32).tolist()
            if not c["x_vector_only"]:
                t = c.pop("ref_frames")
                code = np.concatenate([rng.integers(0, 2048, (t, 1)), rng.integers(0, cpv, (t, 15))], axis=1)
                c["ref_code"] = code.tolist()

    if eos_case:
        # Craft the EOS row from a greedy hidden state so that EOS wins a few frames in.
        zero_eos(model)
        w = load_wrapper(d, model)
        probe = run_case(w, cases[eos_case], 6)
        _, h = talker_prefill(model, probe["prefill"])
        with torch.no_grad():
            v = torch.tensor(h)
            model.talker.codec_head.weight[cfg["talker_config"]["codec_eos_token_id"]] = (
                (4.0 * v / v.norm()).to(torch.bfloat16).float())
    save(d, model, cfg)
    w = load_wrapper(d, model)
    g: dict[str, np.ndarray] = {}
    if eos_case:
        r = run_case(w, cases[eos_case], 60)
        n = len(r["codes"])
        assert 2 <= n < 59, f"EOS case stopped after {n} frames"
        g["eos/codes"] = r["codes"].astype(np.int32)
        print(f"{name}: EOS after {n} frames")
    zero_eos(model)
    for cname, case in cases.items():
        frames = GREEDY_FRAMES if cname in greedy else None
        r = run_case(w, case, frames)
        g[f"{cname}/prefill"] = r["prefill"]
        g[f"{cname}/trailing"] = r["trailing"]
        g[f"{cname}/tts_pad"] = r["tts_pad"]
        for i, (text, ids) in enumerate(r["tokenized"]):
            g[f"{cname}/tokens{i}"] = ids.astype(np.int32)
            case.setdefault("tokenized_texts", []).append(text)
        if frames:
            assert r["codes"].shape == (frames, 16), r["codes"].shape
            g[f"{cname}/greedy_codes"] = r["codes"].astype(np.int32)
        if cname == prefill_case:
            logits, hid = talker_prefill(model, r["prefill"])
            g["prefill/logits"], g["prefill/hidden"] = logits, hid
            g["prefill/embeds"] = r["prefill"]
    np.savez_compressed(OUT / f"{name}.goldens.npz", **g)
    (OUT / f"{name}.cases.json").write_text(json.dumps(
        {"greedy": greedy, "prefill_case": prefill_case, "eos_case": eos_case, "greedy_frames": GREEDY_FRAMES,
         "cases": cases}, indent=1))
    size = sum(f.stat().st_size for f in d.iterdir())
    print(f"{name}: {len(g)} goldens, folder {size / 1e6:.2f} MB")


def main() -> None:
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    record("tiny-base", "base", 1, {
        "icl": dict(mode="clone", text="Hello world, the voice.", language="english", x_vector_only=False,
                    ref_text="the user in", ref_frames=4),
        "icl_long_ref": dict(mode="clone", text="Hello.", language="auto", x_vector_only=False,
                             ref_text="speak", ref_frames=12),
        "icl_nonstream": dict(mode="clone", text="Hello world.", language="german", x_vector_only=False,
                              ref_text="the calm voice", ref_frames=5, non_streaming=True),
        "xvec": dict(mode="clone", text="Hello world.", language="auto", x_vector_only=True),
        "xvec_nonstream": dict(mode="clone", text="the voice", language="english", x_vector_only=True,
                               non_streaming=True),
    }, greedy=["icl", "xvec"], prefill_case="icl", eos_case="xvec")
    record("tiny-customvoice", "custom_voice", 2, {
        "instruct": dict(mode="custom_voice", text="Hello world.", speaker="Ryan", language="english",
                         instruct="Speak in a calm voice."),
        "dialect": dict(mode="custom_voice", text="the world", speaker="eric", language="auto"),
        "stream": dict(mode="custom_voice", text="Hello the world.", speaker="serena", language="chinese",
                       non_streaming=False),
    }, greedy=["instruct"], prefill_case="instruct", eos_case=None)
    record("tiny-voicedesign", "voice_design", 3, {
        "design": dict(mode="voice_design", text="Hello world.", language="auto",
                       instruct="A calm user voice."),
        "design_stream": dict(mode="voice_design", text="the voice", language="english",
                              instruct="Speak.", non_streaming=False),
    }, greedy=["design"], prefill_case="design", eos_case=None)


if __name__ == "__main__":
    main()
