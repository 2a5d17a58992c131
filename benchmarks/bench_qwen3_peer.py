"""Full-frame time, ttscli vs mlx-audio 0.6.2, same shapes, same process, interleaved.

mlx-audio is NOT a dependency: install it into a scratch venv and run this file with that
venv's python (ttscli is imported from the repo checkout):

    python3 -m venv /tmp/mavenv && /tmp/mavenv/bin/pip install mlx==<same as .venv> \
        huggingface_hub mlx-lm scipy && /tmp/mavenv/bin/pip install --no-deps mlx-audio==0.6.2
    /tmp/mavenv/bin/python benchmarks/bench_qwen3_peer.py [--preset 0.6B-Base] [--frames 8] [--rounds 3]
    /tmp/mavenv/bin/python benchmarks/bench_qwen3_peer.py --batch 1,4,16,64   # batched generation, both

The BLAS both use is ttscli's choice (ttscli/_blas.py; the mavenv has no ``mkl`` wheel, so
point TTSCLI_BLAS at ours: ``TTSCLI_BLAS=.venv/lib/libmkl_rt.so.3``). ``--only
mlx-audio`` with ``TTSCLI_BLAS=none`` times mlx-audio as its own install runs it on Linux (the
``mlx[cpu]`` wheel's BLAS); ``--only ours`` times ttscli alone.

A frame = talker step + 15 code-predictor steps + sampling + next-input embedding, synced once
(both implementations sync once per frame).  mlx-audio's frame is driven with its own
modules and sampler (``Model._sample_token``), as its generate() loop calls them.  Both
models get random float32 weights at the preset's real dimensions; the text embedding (unused
per frame) is shrunk in both to save memory.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ttscli  # noqa: F401  (preloads OpenBLAS before mlx, for both implementations)
import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ttscli.generate import Stats
from ttscli.lm import MLXCodeDecoder
from ttscli.models.qwen3_tts.config import GenerationConfig, preset_config
from ttscli.models.qwen3_tts.loop import LoopConfig, generate_frames
from ttscli.models.qwen3_tts.model import build_random
from ttscli.models.qwen3_tts.prompt import Prompt


def peer_model(cfg: dict):
    from mlx_audio.tts.models.qwen3_tts.config import Qwen3TTSTalkerConfig
    from mlx_audio.tts.models.qwen3_tts.talker import Qwen3TTSTalkerForConditionalGeneration

    t = dict(cfg["talker_config"])
    names = Qwen3TTSTalkerConfig.__dataclass_fields__
    talker = Qwen3TTSTalkerForConditionalGeneration(Qwen3TTSTalkerConfig(**{k: v for k, v in t.items() if k in names}))
    talker.model.text_embedding = nn.Embedding(8, t["text_hidden_size"])
    mx.eval(talker.parameters())
    return talker


def peer_frames(talker, x, n_frames: int, prompt_len: int):
    """mlx-audio's per-frame sequence (talker step, sample c0, 15 CP steps, next embedding, 1 sync)."""
    from mlx_audio.tts.models.qwen3_tts.qwen3_tts import Model

    cfg = talker.config
    sample = lambda logits, **kw: Model._sample_token(None, logits, **kw)  # noqa: E731
    suppress = [i for i in range(cfg.vocab_size - 1024, cfg.vocab_size) if i != cfg.codec_eos_token_id]
    cache = talker.make_cache()
    code_cache = talker.code_predictor.make_cache()
    logits, hidden = talker(x, cache=cache)
    mx.eval(logits, hidden)
    emb = x[:, -1:]
    times, generated = [], []
    for _ in range(n_frames):
        t0 = time.perf_counter()
        logits, hidden = talker(emb, cache=cache)
        tok = sample(logits, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05,
                     generated_tokens=generated or None, suppress_tokens=suppress)
        codes = [tok]
        for c in code_cache:
            c.keys, c.values, c.offset = None, None, 0
        h = hidden[:, -1:, :]
        for j in range(cfg.num_code_groups - 1):
            inp = (mx.concatenate([h, talker.get_input_embeddings()(tok)], axis=1) if j == 0 else
                   talker.code_predictor.codec_embedding[j - 1](codes[-1]))
            cl, code_cache, _ = talker.code_predictor(inp, cache=code_cache, generation_step=j)
            codes.append(sample(cl, temperature=0.9, top_k=50, top_p=1.0))
        e = talker.get_input_embeddings()(tok)
        for i, c in enumerate(codes[1:]):
            e = e + talker.code_predictor.codec_embedding[i](c)
        emb = e + x[:, :1]
        mx.eval(emb)
        generated.append(int(tok[0, 0]))
        times.append(time.perf_counter() - t0)
    return times


def peer_batch_steps(talker, x, n_frames: int, B: int):
    """mlx-audio's ``Model.batch_generate`` step for ``B`` equal-length rows, driven with its own
    methods (talker forward, ``_sample_token_batch``, ``_predict_code_tokens``,
    ``_next_batch_input_embeds``, one eval and its per-row bookkeeping); seconds per step."""
    from types import SimpleNamespace

    from mlx_audio.tts.models.qwen3_tts.qwen3_tts import Model

    m = Model.__new__(Model)
    object.__setattr__(m, "talker", talker)
    object.__setattr__(m, "config", SimpleNamespace(talker_config=talker.config))
    cfg = talker.config
    eos = cfg.codec_eos_token_id
    suppress = m._suppress_codec_tokens(eos)
    xb = mx.repeat(x, B, axis=0)
    trailing = mx.repeat(x[:, :1], B, axis=0)
    pad = x[:, :1]
    cache = talker.make_cache()
    code_cache = talker.code_predictor.make_cache()
    logits, hidden = talker(xb, cache=cache)
    mx.eval(logits, hidden)
    inputs = xb[:, -1:]
    finished = mx.zeros((B,), dtype=mx.bool_)
    idx = mx.zeros((B, 1), dtype=mx.int32)
    eos_fill = mx.full((B, 1), eos, dtype=mx.int32)
    seen = [[] for _ in range(B)]
    times = []
    for _ in range(n_frames):
        t0 = time.perf_counter()
        logits, hidden = talker(inputs, cache=cache)
        tok = m._sample_token_batch(logits, temperature=0.9, top_k=50, top_p=1.0, repetition_penalty=1.05,
                                    generated_tokens_per_seq=seen, suppress_tokens=suppress)
        tok = mx.where(finished[:, None], eos_fill, tok)
        code_tokens, all_codes = m._predict_code_tokens(tok, hidden, temperature=0.9, top_k=50, top_p=1.0,
                                                        code_cache=code_cache)
        inputs = m._next_batch_input_embeds(trailing, pad, idx, code_tokens, pad_when_index_clamped=True)
        mx.eval(all_codes, inputs, finished)
        ids = tok[:, 0].tolist()
        for b in range(B):
            seen[b].append(ids[b])
        times.append(time.perf_counter() - t0)
    return times


def our_batch_steps(model, x, n_frames: int, B: int):
    """ttscli's batched frame (ttscli.models.qwen3_tts.batched) for ``B`` rows; seconds per step."""
    from ttscli.lm import KeyStream
    from ttscli.models.qwen3_tts.batched import TalkerBatch, TalkerRow

    cfg = LoopConfig.from_generation_config(GenerationConfig(), max_frames=n_frames)
    cfg.ignore_eos = True
    batch = TalkerBatch(model.talker)
    batch.join([TalkerRow(Prompt(x, x[:, :0], x[:, :1]), cfg, KeyStream(i)) for i in range(B)])
    times = []
    while batch.rows:
        t0 = time.perf_counter()
        batch.step()
        times.append(time.perf_counter() - t0)
    return times


def our_frames(model, x, n_frames: int):
    cfg = LoopConfig.from_generation_config(GenerationConfig(), max_frames=n_frames)
    cfg.ignore_eos = True
    st = Stats()
    for _ in generate_frames(model.talker, MLXCodeDecoder(model.talker), Prompt(x, x[:, :0], x[:, :1]), cfg,
                             seed=0, stats=st):
        pass
    return st.frame_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="0.6B-Base")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=50)
    ap.add_argument("--peer-dtype", default="float32",
                    help="bfloat16: mlx-audio as the mlx-community *-bf16 conversions run it (ours stays float32)")
    ap.add_argument("--only", choices=["both", "ours", "mlx-audio"], default="both")
    ap.add_argument("--batch", default=None,
                    help="e.g. 1,4,16,64: batched frames (ours: TalkerBatch; mlx-audio: batch_generate's step)")
    a = ap.parse_args()
    cfg = preset_config(a.preset)
    cfg.pop("speaker_encoder_config", None)
    cfg["tts_model_type"] = "custom_voice" if cfg["tts_model_type"] == "base" else cfg["tts_model_type"]
    ours = theirs = None
    if a.only != "mlx-audio":
        ours = build_random(cfg, "float32")
        ours.talker.model.text_embedding = nn.Embedding(8, cfg["talker_config"]["text_hidden_size"])
    if a.only != "ours":
        theirs = peer_model(cfg)
    peer_dt = getattr(mx, a.peer_dtype)
    if theirs is not None and peer_dt != mx.float32:
        from mlx.utils import tree_map

        theirs.update(tree_map(lambda p: p.astype(peer_dt), theirs.parameters()))
        mx.eval(theirs.parameters())
    H = cfg["talker_config"]["hidden_size"]
    x = mx.random.normal((1, a.prompt, H), key=mx.random.key(0)) * 0.1
    mx.eval(x)
    if a.batch:
        return batch_table(a, ours, theirs, x)
    res = {"ours_ms": [], "mlx_audio_ms": []}
    for _ in range(a.rounds):
        if ours is not None:
            res["ours_ms"].append(float(np.median(our_frames(ours, x, a.frames)[2:]) * 1e3))
        if theirs is not None:
            res["mlx_audio_ms"].append(float(np.median(peer_frames(theirs, x.astype(peer_dt), a.frames,
                                                                   a.prompt)[2:]) * 1e3))
    from ttscli import _blas

    res.update(preset=a.preset, peer_dtype=a.peer_dtype, blas=_blas.name(), device=str(mx.default_device()))
    if ours is not None:
        res["ours_frame_ms"] = float(np.median(res["ours_ms"]))
    if theirs is not None:
        res["mlx_audio_frame_ms"] = float(np.median(res["mlx_audio_ms"]))
    if ours is not None and theirs is not None:
        res["speedup"] = res["mlx_audio_frame_ms"] / res["ours_frame_ms"]
    print(json.dumps(res, indent=1))


def batch_table(a, ours, theirs, x):
    """Per batch size: step time (median over rounds of the per-round median, first 2 steps
    dropped) and audio-seconds generated per wall-second (B rows x 1 frame of 80 ms per step)."""
    from ttscli import _blas

    out = {"preset": a.preset, "device": str(mx.default_device()), "blas": _blas.name(), "sizes": {}}
    for B in [int(b) for b in a.batch.split(",")]:
        row = {}
        for name, model, fn in (("ours", ours, our_batch_steps), ("mlx_audio", theirs, peer_batch_steps)):
            if model is None:
                continue
            meds = [float(np.median(fn(model, x, a.frames, B)[2:])) for _ in range(a.rounds)]
            step = float(np.median(meds))
            row[f"{name}_step_ms"] = step * 1e3
            row[f"{name}_audio_s_per_s"] = B * 0.08 / step
        if "ours_step_ms" in row and "mlx_audio_step_ms" in row:
            row["ours_vs_mlx_audio"] = row["mlx_audio_step_ms"] / row["ours_step_ms"]
        out["sizes"][B] = row
        print(json.dumps({B: row}), flush=True)
    base = out["sizes"][min(out["sizes"])]
    for row in out["sizes"].values():
        for name in ("ours", "mlx_audio"):
            if f"{name}_audio_s_per_s" in row:
                row[f"{name}_vs_smallest_batch"] = row[f"{name}_audio_s_per_s"] / base[f"{name}_audio_s_per_s"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
