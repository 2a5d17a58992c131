"""`ttscli parity pocket-tts --golden FILE.npz`: one request against goldens from upstream.

Keys (docs/parity.md; scripts/goldens/pocket_tts_upstream.py writes them): ``text`` (as given) and
``tokens`` (upstream's prepared prompt), ``voice`` (a built-in voice name; default: the model's),
``frames_after_eos``, ``prefill_hidden [H]`` (after the voice and the text), ``noise [T, latent]``
(the flow head's draws, fed to ours), ``step_hidden [T, H]``, ``eos_logits [T]``, ``latents
[T', latent]`` (the frames kept), ``audio`` (the waveform, first 5 ms faded in); optional
``mimi_decoded`` (the latents decoded in one call, no fade), ``ref_audio`` + ``voice_latents`` +
``voice_prompt_hidden`` (a clone reference, its Mimi latents and the prefill hidden of its voice
prompt).

``--against onnx[-f32|-int8|-int4]``: the flow LM on MLX against its graphs on onnxruntime, frame
by frame on the same inputs (both fed MLX's latents, so one step's error does not carry into the
next) and the same noise; ``--golden`` with ``--code-decoder-backend onnx-f32`` checks the graph
against upstream's goldens as MLX is.
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
    frame = pipe.frame

    def record(embed, cache, draw, steps):
        logit, h, latent = frame(embed, cache, draw, steps)
        eos.append(float(logit[0, 0]))
        hidden.append(np.array(h[0]))
        return logit, h, latent

    knobs = {"frames_after_eos": int(g["frames_after_eos"])} if "frames_after_eos" in g else {}
    req = Request(text=str(g["text"]), voice=str(g["voice"]) if "voice" in g else None, knobs=knobs,
                  max_frames=frames, ignore_eos=frames is not None, **request)
    pipe.noise = lambda keys, temperature, clamp: mx.array(next(noise))[None]
    pipe.frame = record
    try:
        audio = list(pipe.generate(req))
    finally:
        del pipe.noise
        del pipe.frame
    return audio, hidden, eos


def parity_checks(spec, checkpoint: Path | None, *, golden: Path | None = None, against: str | None = None,
                  frames: int = 20, backend: str | None = None) -> list:
    import mlx.core as mx

    from ttscli.errors import UsageError
    from ttscli.models.base import Check, LoadOptions, Request, cosine
    from ttscli.models.pocket_tts.load import load_pipeline
    from ttscli.models.pocket_tts.prompt import end_on_pause, prepare_text

    if (golden is None) == (against is None):
        raise UsageError("pocket-tts parity needs --golden FILE.npz (format: docs/parity.md) or --against "
                         "onnx|onnx-f32|onnx-int8|onnx-int4, not both")
    if checkpoint is None:
        raise UsageError("pocket-tts parity needs the checkpoint to load (--model-dir)")
    if frames < 1:
        raise UsageError("--frames must be at least 1")
    if against is not None:
        if backend not in (None, "mlx"):
            raise UsageError("--against compares MLX with that backend; drop --code-decoder-backend")
        return against_checks(spec, Path(checkpoint), against, frames)
    if backend not in (None, "mlx", "onnx-f32"):
        raise UsageError(f"pocket-tts checks the goldens on mlx or onnx-f32, not {backend} "
                         "(--against onnx-int8|onnx-int4 measures those against MLX)")
    g = read_golden(golden)
    pipe = load_pipeline(spec, Path(checkpoint), LoadOptions(backends={"flow_lm": backend or "mlx"}))
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


AGAINST_TEXT = "Hello world, this is a check of the flow language model."
# per precision: frame hidden and prefill hidden (worst cosine), latent (worst max abs error / peak
# of MLX's latents, noise included); float32 differs by summation order only, int8 / int4 by their
# weights' rounding (blocks of 32 along K, symmetric)
ONNX_COSINE = {"float32": 0.99999, "int8": 0.999, "int4": 0.95}
ONNX_LATENT = {"float32": 1e-4, "int8": 0.05, "int4": 0.3}


def trace(pipe, tokens: list[int], latents: list | None, frames: int, seed: int = 0):
    """Prefill hidden, then per frame (EOS logit, hidden, latent) of ``pipe``, each frame fed
    ``latents[i - 1]`` (``None``: its own previous latent) and noise ``normal(key(seed + i))``
    at the default temperature."""
    import mlx.core as mx

    from ttscli.models.base import Request

    lm, dec = pipe.model.flow_lm, pipe.code_decoder
    cache = pipe.voice_cache(Request(text="x"))
    _, prefill_hidden = dec.prefill(lm.text_embeddings(mx.array([tokens])), cache)
    std = pipe.args.temperature ** 0.5
    out, prev = [], None
    for i in range(frames):
        noise = mx.random.normal((1, pipe.args.latent_dim), key=mx.random.key(seed + i)) * std
        eos, hidden, latent = pipe.frame(lm.latent_embeddings(prev), cache, noise, 1)
        out.append((float(eos[0, 0]), np.array(hidden[0]), np.array(latent[0])))
        prev = (mx.array(latents[i])[None] if latents is not None else latent)[:, None]
    return np.array(prefill_hidden[0]), out


def against_checks(spec, checkpoint: Path, against: str, frames: int) -> list:
    """MLX against the ONNX flow LM at each precision asked (``onnx``: all three)."""
    from ttscli.backends.select import split_backend
    from ttscli.models.base import Check, LoadOptions, cosine
    from ttscli.models.pocket_tts.load import load_pipeline
    from ttscli.models.pocket_tts.prompt import prepare_text

    ref = load_pipeline(spec, checkpoint, LoadOptions())
    tokens = ref.tokenizer.encode(prepare_text(AGAINST_TEXT, ref.args)[0])
    ref_prefill, ref_frames = trace(ref, tokens, None, frames)
    ref_latents = [f[2] for f in ref_frames]
    peak = float(np.abs(np.array(ref_latents)).max())
    threshold = ref.args.eos_threshold
    precisions = ("onnx-f32", "onnx-int8", "onnx-int4") if against == "onnx" else (against,)
    checks = []
    for backend in precisions:
        pipe = load_pipeline(spec, checkpoint, LoadOptions(backends={"flow_lm": backend}))
        name, precision = pipe.backends["flow_lm"], split_backend(backend)[1]
        prefill, got = trace(pipe, tokens, ref_latents, frames)
        checks.append(Check(f"voice + text prefill hidden mlx vs {name} (cosine)", cosine(prefill, ref_prefill),
                            ONNX_COSINE[precision], ">=", f"{len(tokens)} text tokens"))
        worst = min(cosine(a[1], b[1]) for a, b in zip(got, ref_frames))
        checks.append(Check(f"frame hidden mlx vs {name}, worst of {frames} (cosine)", worst,
                            ONNX_COSINE[precision], ">=", "each frame fed MLX's previous latent"))
        err = max(float(np.abs(a[2] - b[2]).max()) for a, b in zip(got, ref_frames)) / peak
        checks.append(Check(f"flow head latent mlx vs {name}, worst (max abs / peak)", err, ONNX_LATENT[precision],
                            "<=", "the same noise"))
        same = sum((a[0] > threshold) == (b[0] > threshold) for a, b in zip(got, ref_frames))
        if precision == "float32":
            checks.append(Check(f"EOS decisions mlx vs {name}", same, frames, "=="))
        else:
            checks.append(Check(f"EOS decisions mlx vs {name}", same, 0, ">=",
                                f"reported, not required: {same}/{frames} equal"))
    return checks
