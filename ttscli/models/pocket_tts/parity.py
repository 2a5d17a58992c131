"""`ttscli parity pocket-tts --golden FILE.npz`: one request against goldens from upstream.

Keys (docs/parity.md; scripts/goldens/pocket_tts_upstream.py writes them): ``text`` (as given) and
``tokens`` (upstream's prepared prompt), ``voice`` (a built-in voice name; default: the model's),
``frames_after_eos``, ``prefill_hidden [H]`` (after the voice and the text), ``noise [T, latent]``
(the flow head's draws, fed to ours), ``step_hidden [T, H]``, ``eos_logits [T]``, ``latents
[T', latent]`` (the frames kept), ``audio`` (the waveform, first 5 ms faded in); optional
``mimi_decoded`` (the latents decoded in one call, no fade), ``ref_audio`` + ``voice_latents`` +
``voice_prompt_hidden`` (a clone reference, its Mimi latents and the prefill hidden of its voice
prompt).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


REQUIRED = ("text", "tokens", "prefill_hidden", "noise", "step_hidden", "eos_logits", "audio")


def read_golden(path: Path) -> dict[str, np.ndarray]:
    from ttscli.models.base import read_golden_npz

    return read_golden_npz(path, REQUIRED)


def replay(pipe, g: dict[str, np.ndarray], frames: int | None = None, **request):
    """Our generation of the golden's request with its recorded noise: (audio chunks, hidden per
    frame, EOS logit per frame). ``frames`` caps the frames run (an EOS stop may come first)."""
    import mlx.core as mx

    from ttscli.models.base import Request

    noise = iter(g["noise"])
    hidden, eos = [], []
    decoder = pipe.code_decoder
    step = decoder.step

    def record(embed, cache):
        logit, h = step(embed, cache)
        eos.append(float(logit[0, 0]))
        hidden.append(np.array(h[0]))
        return logit, h

    knobs = {"frames_after_eos": int(g["frames_after_eos"])} if "frames_after_eos" in g else {}
    req = Request(text=str(g["text"]), voice=str(g["voice"]) if "voice" in g else None, knobs=knobs,
                  max_frames=frames, ignore_eos=frames is not None, **request)
    pipe.noise = lambda keys, temperature, clamp: mx.array(next(noise))[None]
    decoder.step = record
    try:
        audio = list(pipe.generate(req))
    finally:
        del pipe.noise
        del decoder.step
    return audio, hidden, eos


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    import mlx.core as mx

    from ttscli.models.base import Check, golden_only, LoadOptions, Request, cosine
    from ttscli.models.pocket_tts.load import load_pipeline
    from ttscli.models.pocket_tts.prompt import end_on_pause, prepare_text

    golden_only("pocket-tts", checkpoint, golden, against, backend)
    g = read_golden(golden)
    pipe = load_pipeline(spec, Path(checkpoint), LoadOptions())
    lm, mimi, dec = pipe.model.flow_lm, pipe.model.mimi, pipe.code_decoder
    checks = []
    text, _ = prepare_text(str(g["text"]), pipe.args)
    tokens = pipe.tokenizer.encode(text)
    checks.append(Check("text tokens", int(tokens == g["tokens"].tolist()), 1, "==",
                        f"ours {len(tokens)}, golden {len(g['tokens'])}"))
    if "ref_audio" in g:
        latents = mimi.encode(end_on_pause(g["ref_audio"].astype(np.float32), pipe.sample_rate))
        if "voice_latents" in g:
            checks.append(Check("Mimi encoder latents (cosine)", cosine(np.array(latents[0]), g["voice_latents"]),
                                0.99999, ">="))
        if "voice_prompt_hidden" in g:
            _, h = dec.prefill(lm.voice_embeddings(latents), dec.new_cache())
            checks.append(Check("clone prompt prefill hidden (cosine)",
                                cosine(np.array(h[0]), g["voice_prompt_hidden"]), 0.99999, ">="))

    cache = pipe.voice_cache(Request(text=text, voice=str(g["voice"]) if "voice" in g else None))
    _, h = dec.prefill(lm.text_embeddings(mx.array([tokens])), cache)
    checks.append(Check("voice + text prefill hidden (cosine)", cosine(np.array(h[0]), g["prefill_hidden"]),
                        0.99999, ">="))
    n = min(frames, len(g["step_hidden"]))
    full = n == len(g["step_hidden"])
    audio, hidden, eos = replay(pipe, g, None if full else n)
    k = min(len(hidden), n)
    worst = min((cosine(a, b) for a, b in zip(hidden[:k], g["step_hidden"][:k])), default=0.0)
    checks.append(Check(f"frame hidden, worst of {k} (cosine)", worst, 0.99999, ">="))
    same = sum((a > pipe.args.eos_threshold) == (b > pipe.args.eos_threshold) for a, b in zip(eos[:k], g["eos_logits"]))
    checks.append(Check("EOS decisions", same, n, "==", f"ours {len(eos)} frames, golden {len(g['eos_logits'])}"))
    if full:
        wav, ref = np.concatenate(audio), g["audio"]
        err = float(np.abs(wav - ref).max() / np.abs(ref).max()) if wav.shape == ref.shape else float("inf")
        checks.append(Check("waveform, max error / peak", err, 1e-4, "<=",
                            f"ours {wav.size} samples, golden {ref.size}"))
    if "mimi_decoded" in g and "latents" in g:
        x = mx.array(g["latents"].astype(np.float32))[None] * lm.emb_std + lm.emb_mean
        wav, ref = np.array(mimi.decode(x)[0]), g["mimi_decoded"]
        err = float(np.abs(wav - ref).max() / np.abs(ref).max()) if wav.shape == ref.shape else float("inf")
        checks.append(Check("Mimi decoder waveform, max error / peak", err, 1e-4, "<="))
    return checks
