"""Pocket TTS, ttscli (flow LM on MLX and on onnxruntime int8) vs mlx-audio 0.6.2, same
process, interleaved rounds, real size, random weights.

mlx-audio is NOT a dependency: run this file with the python of a scratch venv that holds it
(benchmarks/README.md, "An mlx-audio environment"); ttscli is imported from the checkout. Its
Pocket TTS port also imports ``requests`` and ``sentencepiece``, and ttscli's onnx side needs
``onnx`` and ``onnxruntime`` there:

    /tmp/mavenv/bin/pip install requests sentencepiece onnx onnxruntime
    TTSCLI_BLAS=.venv/lib/libmkl_rt.so.3 PYTHONPATH=. /tmp/mavenv/bin/python \
        benchmarks/bench_pocket_mlx_audio.py --frames 50 --rounds 3

Both models are built at english.yaml's dimensions (``ttscli.models.pocket_tts.config.ModelArgs``,
turned into mlx-audio's config sections here) with random weights drawn the same way
(``ttscli.nn.init.random_weights``: N(0, 1/fan_in) matrices, zero biases, a unit latent scale),
each in its own layout: the values differ, the cost does not depend on them. Text is UTF-8
bytes on both sides (mlx-audio's sentencepiece tokenizer is replaced by one), so both prompts
have the same length; neither has a voice prompt. mlx-audio's settings that english.yaml leaves
out keep its own defaults (its flow-LM GELU, as a published checkpoint loads); its Mimi encoder
is left out (no voice is encoded). Random weights never stop, so both sides
make exactly ``--frames`` frames: ttscli through ``max_frames`` with EOS ignored, mlx-audio
with its EOS threshold at infinity and the stream closed after ``--frames`` chunks.

What is timed, each side as a streaming user runs it:

* ``stream``: ttscli's ``synthesize(..., stream=True)`` (as ``ttscli bench --stream``; its
  Mimi decoder runs on a thread of its own beside the flow LM) and mlx-audio's
  ``Model.generate_audio_stream`` (one thread: per frame the LM step, the flow head and one
  Mimi decoder frame, each chunk evaluated as the consumer reads it). Figures: first audio,
  total, RTF (total over the audio's length).
* ``stages``: after a ``--prompt-tokens`` prefill, ten frames with a sync after each part:
  ``lm_flow_ms`` (transformer step + flow head; one graph on onnxruntime) and ``mimi_ms`` (one
  decoder frame). ttscli's come from ``ttscli.models.pocket_tts.bench.bench_components``,
  mlx-audio's from the calls its generate loop makes.

Figures: median over rounds (each round: one stream run and one stage pass per side, in turn).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict
from types import SimpleNamespace

import ttscli  # noqa: F401  (first: the BLAS preload must come before mlx)
import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ttscli.models.pocket_tts.config import ModelArgs

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog."
SIDES = ("ttscli_mlx", "ttscli_onnx_int8", "mlx_audio")


class ByteTokenizer:
    """UTF-8 bytes as token ids, in mlx-audio's tokenizer interface (as ttscli reads text with
    random weights)."""

    def __init__(self, n_bins: int, tokenizer_path: str | None = None):
        self.n_bins = n_bins

    def __call__(self, text: str):
        from mlx_audio.tts.models.pocket_tts.conditioners import TokenizedText

        return TokenizedText(mx.array(list(text.encode()), dtype=mx.int32)[None, :])

    def decode(self, tokens: list[int]) -> str:
        return bytes(tokens).decode("utf-8", "replace")


def peer_config(a: ModelArgs, temperature: float) -> dict:
    """mlx-audio's config sections (upstream's yaml layout) for ttscli's ``ModelArgs``."""
    f, m = a.flow_lm, a.mimi
    ratios = list(m.upsampling_ratios)
    return {
        "temp": temperature, "lsd_decode_steps": 1, "eos_threshold": math.inf,
        "flow_lm": {"dtype": "float32", "flow": {"dim": f.flow_dim, "depth": f.flow_depth},
                    "transformer": {"d_model": f.d_model, "hidden_scale": f.feedforward / f.d_model,
                                    "max_period": f.max_period, "num_heads": f.num_heads,
                                    "num_layers": f.num_layers},
                    "lookup_table": {"dim": f.d_model, "n_bins": f.n_bins, "tokenizer": "bytes",
                                     "tokenizer_path": ""}},
        "mimi": {"dtype": "float32", "sample_rate": m.sampling_rate, "channels": 1, "frame_rate": m._frame_rate,
                 "encoder_enabled": False,
                 "seanet": {"dimension": m.hidden_size, "channels": 1, "n_filters": m.num_filters,
                            "n_residual_layers": m.num_residual_layers, "ratios": ratios,
                            "kernel_size": m.kernel_size, "residual_kernel_size": m.residual_kernel_size,
                            "last_kernel_size": m.last_kernel_size, "dilation_base": m.dilation_growth_rate,
                            "pad_mode": m.pad_mode, "compress": m.compress},
                 "transformer": {"d_model": m.hidden_size, "input_dimension": m.hidden_size,
                                 "output_dimensions": [m.hidden_size], "num_heads": m.num_attention_heads,
                                 "num_layers": m.num_hidden_layers, "layer_scale": 0.01,
                                 "context": m.attention_window, "dim_feedforward": m.intermediate_size,
                                 "max_period": m.rope_theta},
                 "quantizer": {"dimension": m.latent_dim, "output_dimension": m.hidden_size}},
    }


def peer_model(a: ModelArgs, temperature: float):
    """mlx-audio's Pocket TTS at ``a``'s size, bytes for text, random weights."""
    from mlx_audio.tts.models.pocket_tts import conditioners
    from mlx_audio.tts.models.pocket_tts.pocket_tts import Model

    from ttscli.nn.init import random_weights

    conditioners.SentencePieceTokenizer = ByteTokenizer    # the class LUTConditioner builds for "bytes"
    model = Model(peer_config(a, temperature))
    random_weights(model, rule=lambda name, w, normal: mx.ones(w.shape) if name.endswith("emb_std") else w)
    model.load_weights(list(tree_flatten(model.parameters())))   # its post-load hooks (transposed convs)
    mx.eval(model.parameters())
    return model


def peer_stream(model, text: str, frames: int) -> dict:
    """mlx-audio's streaming generator for exactly ``frames`` frames."""
    t0 = time.perf_counter()
    first, n = None, 0
    stream = model.generate_audio_stream(model.init_state(), text, frames_after_eos=0)
    for i, chunk in enumerate(stream):
        n += np.asarray(chunk).size
        if first is None:
            first = time.perf_counter() - t0
        if i + 1 == frames:
            break
    stream.close()
    total = time.perf_counter() - t0
    audio_s = n / model.sample_rate
    return {"first_audio_s": first, "total_s": total, "audio_s": audio_s, "rtf": total / audio_s}


def peer_stages(model, prompt_tokens: int) -> dict:
    """LM step + flow head, then one Mimi frame, each synced, as mlx-audio's loop calls them."""
    state = model.init_state()
    model.mimi.reset_state()
    tokens = mx.array(np.arange(prompt_tokens, dtype=np.int32)[None] % model.config.flow_lm.lookup_table.n_bins)
    model._run_flow_lm(model_state=state, text_tokens=tokens)
    mx.eval([(c.keys, c.values) for c in state["flow_cache"] if c.keys is not None])
    latent = mx.full((1, 1, model.flow_lm.ldim), float("nan"), dtype=mx.float32)
    lm_ms, mimi_ms = [], []
    for i in range(10):
        t = time.perf_counter()
        latent, _ = model._run_flow_lm(model_state=state, backbone_input_latents=latent)
        mx.eval(latent)
        t1 = time.perf_counter()
        quantized = model.mimi.quantizer((latent * model.flow_lm.emb_std + model.flow_lm.emb_mean).transpose(0, 2, 1))
        mx.eval(model.mimi.decode_step(quantized))
        t2 = time.perf_counter()
        if i >= 2:
            lm_ms.append((t1 - t) * 1e3)
            mimi_ms.append((t2 - t1) * 1e3)
    return {"lm_flow_ms": float(np.median(lm_ms)), "mimi_ms": float(np.median(mimi_ms))}


def our_pipe(backend: str):
    from ttscli.api import load
    from ttscli.models.base import LoadOptions

    return load("pocket-tts", options=LoadOptions(backends={"flow_lm": backend}, random_weights=True))


def our_stream(pipe, text: str, frames: int, seed: int) -> dict:
    from ttscli.bench import run_once
    from ttscli.generate import Request

    r = run_once(pipe, Request(text=text, seed=seed, stream=True, max_frames=frames, ignore_eos=True))
    return {k: r[k] for k in ("first_audio_s", "total_s", "audio_s", "rtf")}


def our_stages(pipe, prompt_tokens: int) -> dict:
    from ttscli.models.pocket_tts.bench import bench_components

    c = bench_components(pipe, SimpleNamespace(prompt_tokens=prompt_tokens))
    return {"lm_flow_ms": c["lm_step_ms"] + c.get("flow_head_ms", 0.0), "mimi_ms": c["mimi_frame_ms"]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=50, help="frames per stream run, both sides (default 50)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ap.add_argument("--prompt-tokens", type=int, default=200, help="prefill before the stage split (default 200)")
    ap.add_argument("--temperature", type=float, default=ModelArgs().temperature)
    ap.add_argument("--out", help="also write the JSON here")
    a = ap.parse_args(argv)
    try:
        import mlx_audio.tts.models.pocket_tts.pocket_tts  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"mlx-audio's Pocket TTS is not importable here ({e}); run with its venv's python") from None

    sides = {"ttscli_mlx": our_pipe("mlx"), "ttscli_onnx_int8": our_pipe("onnx-int8"),
             "mlx_audio": peer_model(ModelArgs(), a.temperature)}
    stream = {"ttscli_mlx": our_stream, "ttscli_onnx_int8": our_stream,
              "mlx_audio": lambda m, text, frames, seed: peer_stream(m, text, frames)}
    stages = {"ttscli_mlx": our_stages, "ttscli_onnx_int8": our_stages, "mlx_audio": peer_stages}
    for name, obj in sides.items():          # warm-up: compile, first allocations
        stream[name](obj, a.text, min(a.frames, 5), 0)
    raw = {s: [] for s in SIDES}
    for r in range(a.rounds):
        for name in SIDES:
            fig = {**stream[name](sides[name], a.text, a.frames, r), **stages[name](sides[name], a.prompt_tokens)}
            raw[name].append(fig)
        print(json.dumps({"round": r, **{s: {k: round(v, 4) for k, v in raw[s][-1].items()} for s in SIDES}}),
              file=sys.stderr, flush=True)

    from ttscli import _blas

    res = {"device": str(mx.default_device()), "blas": _blas.name(), "mlx": mx.__version__,
           "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(), "text": a.text, "frames": a.frames,
           "rounds": a.rounds, "prompt_tokens": a.prompt_tokens, "dims": asdict(ModelArgs().flow_lm),
           "onnx_backend": sides["ttscli_onnx_int8"].backends.get("flow_lm")}
    for s in SIDES:
        res[s] = {k: float(np.median([f[k] for f in raw[s]])) for k in raw[s][0]}
    res["mlx_audio_over"] = {s: {k: res["mlx_audio"][k] / res[s][k] for k in res[s]}
                             for s in ("ttscli_mlx", "ttscli_onnx_int8")}
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return res


if __name__ == "__main__":
    main()
