"""Record a ``ttscli parity --golden`` file for ANY Qwen3-TTS checkpoint with the upstream code.

Runs qwen-tts (0.1.1, the reference venv built by scripts/reference-venv.sh) in float32 with
eager attention on one request and saves every array of the Qwen3-TTS goldens format
(docs/parity.md): the request (``case/json``), the talker prompt, the prefill logits/hidden,
greedy frames and a speech-decoder waveform.

    REFVENV/bin/python scripts/goldens/qwen3_parity_golden.py --checkpoint DIR --out FILE.npz \
        [--case CASE.json | --case '{"mode": "custom_voice", "text": "Hi.", "speaker": "Ryan"}'] \
        [--frames 20] [--decoder-frames N]
    .venv/bin/ttscli parity MODEL --model-dir DIR --golden FILE.npz

DIR is a checkpoint folder in the published Hugging Face layout (with ``speech_tokenizer/``).
The case keys are those of ``case/json``; ``mode`` is ``clone`` (Base), ``custom_voice`` or
``voice_design``. Without ``--case`` a fixed request for the checkpoint's kind is used (Base:
x-vector-only clone with a seeded random x-vector). The EOS row of ``codec_head`` is zeroed
for the prefill and greedy goldens so that greedy decoding runs ``--frames`` frames
(``greedy/zero_eos_row``). The decoder golden decodes the greedy frames; ``--decoder-frames N``
decodes N seeded random frames instead (for tiny test checkpoints whose talker and tokenizer
codebooks do not match).

Checked on the tiny fixture: ``--checkpoint tests/fixtures/parity/qwen3-tiny-base --case`` with
the ``icl`` case of tests/fixtures/qwen3_tts/tiny-base.cases.json reproduces the committed
goldens exactly.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "scripts" / "goldens"))
import reference_stubs  # noqa: F401  (must precede qwen_tts)

import torch
from transformers import AutoConfig, AutoProcessor
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration, Qwen3TTSProcessor
from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model
from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel

# capture helpers shared with the tiny-fixture generator
from qwen3_talker import RecordingDecoder, run_case, talker_prefill, zero_eos


def default_case(cfg: dict) -> dict:
    kind = cfg["tts_model_type"]
    case = {"text": "Parity check: one, two, three.", "language": "english"}
    if kind == "custom_voice":
        case.update(mode="custom_voice", speaker=sorted(cfg["talker_config"]["spk_id"])[0])
    elif kind == "voice_design":
        case.update(mode="voice_design", instruct="A calm, clear voice.")
    else:
        dim = cfg.get("speaker_encoder_config", {}).get("enc_dim", cfg["talker_config"]["hidden_size"])
        xv = np.random.default_rng(0).standard_normal(dim) * 0.5
        case.update(mode="clone", x_vector=xv.astype(np.float32).tolist(), x_vector_only=True)
    return case


def load(checkpoint: Path):
    """The upstream model in float32 without its speech tokenizer (decoded separately below)."""
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig, exist_ok=True)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor, exist_ok=True)
    # The class's own from_pretrained also loads speech_tokenizer/ through a feature extractor;
    # the parent loader reads just the talker weights.
    base = super(Qwen3TTSForConditionalGeneration, Qwen3TTSForConditionalGeneration)
    model = base.from_pretrained(str(checkpoint), dtype=torch.float32, attn_implementation="eager").eval()
    processor = AutoProcessor.from_pretrained(str(checkpoint), fix_mistral_regex=True)
    model.load_speech_tokenizer(RecordingDecoder())
    gen = json.loads((checkpoint / "generation_config.json").read_text(encoding="utf-8"))
    return Qwen3TTSModel(model=model, processor=processor, generate_defaults=gen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--case", help="request as JSON text or a .json file (default: one per model kind)")
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--decoder-frames", type=int, default=0, help="decode N random frames instead of the greedy ones")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = json.loads((a.checkpoint / "config.json").read_text(encoding="utf-8"))
    if a.case:
        text = Path(a.case).read_text(encoding="utf-8") if a.case.endswith(".json") else a.case
        case = json.loads(text)
        case = case.get("cases", {}).get(case.get("prefill_case"), case)      # a fixture *.cases.json
        case.pop("tokenized_texts", None)
    else:
        case = default_case(cfg)

    w = load(a.checkpoint)
    zero_eos(w.model)
    r = run_case(w, case, a.frames)
    logits, hidden = talker_prefill(w.model, r["prefill"])
    out = {
        "case/json": np.array(json.dumps(case)),
        "prompt/embeds": r["prefill"].astype(np.float32),
        "prompt/trailing": r["trailing"].astype(np.float32),
        "prompt/tts_pad": r["tts_pad"].astype(np.float32),
        "prefill/embeds": r["prefill"].astype(np.float32),
        "prefill/logits": logits.astype(np.float32),
        "prefill/hidden": hidden.astype(np.float32),
        "greedy/codes": np.asarray(r["codes"], np.int32),
        "greedy/zero_eos_row": np.array(True),
    }

    tok = Qwen3TTSTokenizerV2Model.from_pretrained(str(a.checkpoint / "speech_tokenizer")).eval().float()
    if a.decoder_frames:
        dc = tok.config.decoder_config
        codes = np.random.default_rng(0).integers(0, dc.codebook_size, (a.decoder_frames, dc.num_quantizers))
    else:
        codes = out["greedy/codes"]
    with torch.no_grad():
        audio = tok.decode(torch.from_numpy(codes.astype(np.int64))[None]).audio_values[0]
    out["decoder/codes"] = codes.astype(np.int32)
    out["decoder/audio"] = audio.float().numpy().reshape(-1)
    np.savez_compressed(a.out, **out)
    print(f"{a.out}: {len(out['greedy/codes'])} greedy frames, prompt {list(out['prompt/embeds'].shape)}, "
          f"{len(codes)} decoder frames")


if __name__ == "__main__":
    main()
