"""The whole Chatterbox clone path on the tiny checkpoint, by the upstream code (chatterbox-tts 0.1.7):
reference wave -> conditionals (ChatterboxTTS.prepare_conditionals) -> T3 greedy tokens -> S3Gen wave.

Rerun from the repo root in the reference venv, after chatterbox_t3.py and chatterbox_s3gen.py
(it loads their tiny files from tests/fixtures/chatterbox/tiny/ into the upstream classes):

    REFVENV/bin/python scripts/goldens/chatterbox_clone.py

Writes tests/fixtures/chatterbox/clone_goldens.npz: the 24 kHz reference (written as a float WAV
and read back by upstream's librosa.load), the conditionals, the raw T3 tokens (temperature 1e-6,
the generate() defaults otherwise), the tokens S3Gen got, the wave, and the random draws the
flow and the vocoder made (fed to ours).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import chatterbox_s3gen as S
import chatterbox_t3 as A
import numpy as np
import soundfile as sf
import torch
from safetensors.torch import load_file

N_TOKENS = 20


def main() -> None:
    from chatterbox.models.s3tokenizer import drop_invalid_tokens
    from chatterbox.models.tokenizers import EnTokenizer
    from chatterbox.models.voice_encoder import VoiceEncoder
    from chatterbox.models.voice_encoder.config import VoiceEncConfig
    from chatterbox.tts import ChatterboxTTS, punc_norm

    tiny = A.TINY
    t3 = A.build_t3()
    t3.load_state_dict(load_file(str(tiny / "t3_cfg.safetensors")))
    hp = VoiceEncConfig()
    hp.ve_hidden_size = A.VE_HIDDEN
    ve = VoiceEncoder(hp).eval()
    ve.load_state_dict(load_file(str(tiny / "ve.safetensors")))
    s3 = S.build_s3gen()
    missing, unexpected = s3.load_state_dict(load_file(str(tiny / "s3gen.safetensors")), strict=False)
    assert not unexpected and all(k.startswith("tokenizer.") for k in missing), (missing, unexpected)
    tts = ChatterboxTTS(t3.eval(), s3.eval(), ve, EnTokenizer(str(tiny / "tokenizer.json")), "cpu")

    out: dict[str, np.ndarray] = {}
    ref24 = S.synthetic_voice(24000, 4.0, 21)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "ref.wav"
        sf.write(str(path), ref24, 24000, subtype="FLOAT")
        out["ref24"] = sf.read(str(path), dtype="float32")[0]
        tts.prepare_conditionals(str(path), exaggeration=0.5)
    c = tts.conds
    out["speaker_emb"] = c.t3.speaker_emb.detach().numpy()
    out["prompt_tokens"] = c.t3.cond_prompt_speech_tokens.numpy()
    for k in ("prompt_token", "prompt_feat", "embedding"):
        out[f"gen_{k}"] = c.gen[k].detach().numpy()

    text = punc_norm(A.TEXT)
    ids = tts.tokenizer.text_to_tokens(text)
    ids = torch.cat([ids, ids], dim=0)
    ids = torch.nn.functional.pad(ids, (1, 0), value=t3.hp.start_text_token)
    ids = torch.nn.functional.pad(ids, (0, 1), value=t3.hp.stop_text_token)
    with torch.inference_mode():
        toks = t3.inference(t3_cond=c.t3, text_tokens=ids, max_new_tokens=N_TOKENS, temperature=1e-6,
                            cfg_weight=0.5, repetition_penalty=1.2, min_p=0.05, top_p=1.0)[0]
        out["t3_tokens"] = toks.numpy()
        speech = drop_invalid_tokens(toks)
        speech = speech[speech < 6561]
        out["speech_tokens"] = speech.numpy()
        torch.manual_seed(11)
        with S.Recorder() as rec:
            wav, _ = s3.inference(speech_tokens=speech, ref_dict=c.gen)
    out["wav"] = wav[0].detach().numpy()
    out["cfm_noise"] = rec.normal[0][0].numpy()
    out["sine_noise"] = rec.normal[1][0].numpy()
    phase = rec.uniform[0][0, :, 0].numpy()
    phase[0] = 0.0
    out["phase"] = phase
    np.savez_compressed(A.FIX / "clone_goldens.npz", **out)
    print("clone:", {k: v.shape for k, v in out.items()}, "tokens", out["t3_tokens"])


if __name__ == "__main__":
    main()
