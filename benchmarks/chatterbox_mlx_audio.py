"""Chatterbox, ttscli beside mlx-audio 0.6.2: the same text, token count and conditionals.

    TTSCLI_MLX_AUDIO_PYTHON=/tmp/mavenv/bin/python PYTHONPATH=. .venv/bin/python \\
        benchmarks/chatterbox_mlx_audio.py [--frames 50] [--repeats 1] [--json]

ttscli's side is ``ttscli bench chatterbox --random-weights --max-frames N``; mlx-audio's side
runs in a subprocess under another interpreter, since mlx-audio is not a ttscli dependency and
must not share its environment (it pins its own packages): ``TTSCLI_MLX_AUDIO_PYTHON`` names a
Python whose environment has ``mlx-audio==0.6.2`` (and the same ``mlx`` as ttscli). This file
is also the script that interpreter runs (``--peer``): that part imports only numpy, mlx and
mlx_audio. The report is ``ttscli bench``'s, with mlx-audio as one more variant.

What the peer runs: mlx-audio's ``Model.generate`` (T3 with CFG as a batch of two, then S3Gen
with its 10 Euler steps and HiFT) on the text ttscli benches, with the same random conditionals
(same shapes: 150 prompt tokens for T3, 100 prompt tokens and 200 prompt mel frames for S3Gen).
Weights are random at the published shapes (fan-in-scaled normals, as ttscli's
``--random-weights``): the cost does not depend on their values. Random weights never draw the
stop token on purpose, so, as ttscli's bench does, the stop token is masked out and exactly
``--frames`` tokens are generated. The subprocess loads the BLAS library ttscli loaded, so
both sides differ only in model code (``blas`` in the figures says which).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


ENV = "TTSCLI_MLX_AUDIO_PYTHON"
DEFAULT_FRAMES = 50          # ttscli bench's token count with random weights


def _text_ids(text: str, vocab: int = 704) -> list[int]:
    # the same ids ttscli's random-weights tokenizer gives (load._CharTokenizer)
    return [1 + ord(c) % (vocab - 1) for c in text]


def bench_peer(text: str, repeats: int, max_frames: int = DEFAULT_FRAMES) -> dict:
    """Run this file under ``$TTSCLI_MLX_AUDIO_PYTHON``; its JSON figures (``ttscli bench``'s keys)."""
    import subprocess

    from ttscli import _blas
    from ttscli.errors import UsageError

    python = os.environ.get(ENV)
    if not python:
        raise UsageError(f"set {ENV} to a Python with mlx-audio 0.6.2 installed in its own environment "
                         "(python3 -m venv /tmp/mavenv && /tmp/mavenv/bin/pip install mlx-audio==0.6.2)")
    args = {"text": text, "frames": max_frames, "repeats": repeats, "blas": _blas.loaded or ""}
    try:
        proc = subprocess.run([python, os.path.abspath(__file__), "--peer", json.dumps(args)],
                              capture_output=True, text=True, check=False)
    except OSError as e:
        raise UsageError(f"mlx-audio: cannot run {python} ({e.strerror})") from None
    last = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    if proc.returncode != 0 or not last:
        why = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"mlx-audio failed under {python}: {why}")
    try:
        return json.loads(last[0])
    except json.JSONDecodeError:
        raise UsageError(f"mlx-audio under {python} printed no figures: {last[0][:200]}") from None


def main(argv: list[str] | None = None) -> int:
    """ttscli's bench of Chatterbox with random weights, mlx-audio's figures added as a variant."""
    from ttscli.bench import DEFAULT_TEXT, BenchRequest, ratios, render, run_bench
    from ttscli.errors import UsageError
    from ttscli.registry import load_registry

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=DEFAULT_FRAMES, help="T3 tokens generated on each side")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    a = ap.parse_args(argv)
    try:
        peer = bench_peer(a.text, a.repeats, a.frames)     # first: a missing peer fails before the long run
        report = run_bench(BenchRequest(model="chatterbox", random_weights=True, text=a.text, repeats=a.repeats,
                                        max_frames=a.frames, backends=[]), load_registry())
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report["variants"]["mlx-audio"] = peer
    report["ratios"] = ratios(report["variants"])
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        from rich.console import Console

        Console().print(render(report))
    return 0


# ----------------------------------------------------------------------------- the subprocess


def _randomize(module, seed: int = 0) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    mx.random.seed(seed)
    params = []
    for k, v in tree_flatten(module.parameters()):
        if not mx.issubdtype(v.dtype, mx.floating):
            continue
        if k.endswith(("bias", "running_mean")):
            params.append((k, mx.zeros(v.shape, v.dtype)))
        elif v.ndim == 1:
            params.append((k, mx.ones(v.shape, v.dtype)))
        else:
            params.append((k, (mx.random.normal(v.shape) / np.sqrt(int(np.prod(v.shape[1:])))).astype(v.dtype)))
    module.load_weights(params, strict=False)
    mx.eval(module.parameters())


def _run(a: dict) -> dict:
    if a["blas"]:
        import ctypes

        ctypes.CDLL(a["blas"], mode=ctypes.RTLD_GLOBAL)      # before mlx, as ttscli._blas does
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_audio.tts.models.chatterbox.chatterbox import Conditionals, Model
    from mlx_audio.tts.models.chatterbox.config import ModelConfig
    from mlx_audio.tts.models.chatterbox.t3.cond_enc import T3Cond

    t0 = time.perf_counter()
    model = Model(ModelConfig())
    _randomize(model)
    load_s = time.perf_counter() - t0
    t3 = model.t3
    stop = t3.hp.start_speech_token + 1

    step_marks: list[float] = []

    class NoStop(nn.Module):
        """The speech head with the stop token's logit at -1e9 in both CFG rows (finite, so the CFG
        difference stays 0); each call marks the start of a decode step."""

        def __init__(self, head):
            super().__init__()
            self.head = head

        def __call__(self, x):
            step_marks.append(time.perf_counter())
            y = self.head(x)
            return mx.where(mx.arange(y.shape[-1]) == stop, -1e9, y)

    t3.speech_head = NoStop(t3.speech_head)
    ids = _text_ids(a["text"], t3.hp.text_tokens_dict_size)
    model._tokenize_text = lambda text, lang_code="en": mx.array([ids], dtype=mx.int32)

    rng = np.random.default_rng(0)      # the conditionals ttscli's random-weights pipeline uses
    spk = np.abs(rng.standard_normal((1, 256))).astype(np.float32)
    n = 100
    gen = {"prompt_token": mx.array(rng.integers(0, 6561, (1, n)).astype(np.int32)),
           "prompt_token_len": mx.array([n]),
           "prompt_feat": mx.array(rng.standard_normal((1, 2 * n, 80)).astype(np.float32)),
           "prompt_feat_len": None,
           "embedding": mx.array(rng.standard_normal((1, 192)).astype(np.float32))}
    prompt = mx.array(rng.integers(0, 6561, (1, 150)).astype(np.int32))
    conds = Conditionals(T3Cond(speaker_emb=mx.array(spk / np.linalg.norm(spk)), cond_prompt_speech_tokens=prompt,
                                emotion_adv=mx.ones((1, 1, 1)) * 0.5), gen)

    s3_time = [0.0]
    s3_call = model.s3gen.__call__

    def timed_s3gen(*args, **kw):
        t = time.perf_counter()
        out = s3_call(*args, **kw)
        mx.eval(out)
        s3_time[0] += time.perf_counter() - t
        return out

    model.s3gen = _Timed(model.s3gen, timed_s3gen)

    def once() -> dict:
        step_marks.clear()
        s3_time[0] = 0.0
        start = time.perf_counter()
        audio = None
        for r in model.generate(a["text"], conds=conds, exaggeration=0.5, cfg_weight=0.5, temperature=0.8,
                                repetition_penalty=1.2, min_p=0.05, top_p=1.0, max_new_tokens=a["frames"],
                                verbose=False):
            audio = np.array(r.audio)
        total = time.perf_counter() - start
        steps = np.diff(step_marks)
        tokens = len(step_marks)
        audio_s = audio.size / 24000
        return {"total_s": total, "first_audio_s": total, "audio_s": audio_s, "rtf": total / audio_s,
                "frames": tokens, "frame_ms_p50": float(np.median(steps) * 1e3) if steps.size else None,
                "frame_ms_p95": float(np.percentile(steps, 95) * 1e3) if steps.size else None,
                "t3_prefill_s": float(step_marks[1] - start - np.median(steps)) if steps.size else None,
                "t3_tokens_per_s": float(steps.size / steps.sum()) if steps.size else None,
                "s3gen_s_per_audio_s": s3_time[0] / (tokens / 25.0)}

    once()                                                    # warm-up
    runs = [once() for _ in range(max(1, a["repeats"]))]
    out = {k: float(np.median([r[k] for r in runs if r[k] is not None]))
           for k in runs[0] if any(r[k] is not None for r in runs)}
    from peak_memory import peak_rss_mb   # beside this script

    out.update(load_s=load_s, mlx_peak_mb=mx.get_peak_memory() / 2**20,
               rss_peak_mb=peak_rss_mb())
    return out


class _Timed:
    """``model.s3gen`` with a timed ``__call__`` (other attributes pass through)."""

    def __init__(self, inner, call):
        self._inner, self._call = inner, call

    def __call__(self, *args, **kw):
        return self._call(*args, **kw)

    def __getattr__(self, name):
        return getattr(self._inner, name)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peer"]:
        print(json.dumps(_run(json.loads(sys.argv[2]))))
    else:
        raise SystemExit(main())
