"""Breeze TTS 2 frame time, ttscli vs mlx-audio 0.6.2, same shapes, same process, interleaved.

mlx-audio is NOT a dependency: install it into a scratch venv and run this file with that
venv's python (ttscli is imported from the repo checkout):

    python3 -m venv /tmp/mavenv && /tmp/mavenv/bin/pip install mlx==<same as .venv> numpy \
        safetensors tokenizers huggingface_hub rich typer && \
        /tmp/mavenv/bin/pip install --no-deps mlx-audio==0.6.2
    /tmp/mavenv/bin/python benchmarks/bench_breeze_peer.py [--frames 12] [--rounds 3] [--prompt 120]
    /tmp/mavenv/bin/python benchmarks/bench_breeze_peer.py --layers 4 --frames 6 --rounds 2  # quick, CPU
    /tmp/mavenv/bin/python benchmarks/bench_breeze_peer.py --tiny --frames 6 --rounds 1        # smoke test

mlx-audio's Breeze port imports only mlx, numpy and huggingface_hub (its package __init__):
no torch, transformers or scipy, so a ``--no-deps`` install suffices and nothing is stubbed.
``--only ours`` runs in ttscli's own venv without mlx-audio. On a Linux CPU point both at
ttscli's BLAS (``TTSCLI_BLAS=.venv/lib/libmkl_rt.so.3``; a scratch venv has no
``mkl`` wheel). On an NVIDIA GPU (the mlx and mlx-cuda-13 wheels and
``mlx_audio-0.6.2-py3-none-any.whl`` installed ``--no-deps --target /root/site``):

    PYTHONPATH=/root/site:$PWD python3 benchmarks/bench_breeze_peer.py --frames 24 --rounds 3 \
        --out breeze_peer.json

What is timed, per side, each driven with its own modules and sampler as its own generate
loop calls them:

* a frame = backbone step + codebook 0 (guidance, repetition penalty 1.1 on codebook 0,
  reserved ids masked, temperature 0.9, top-k 50) + the depth decoder's 15 codebooks with
  their sampling + the next frame's input. CFG (the default; ``--no-cfg`` turns it off) is
  upstream's recommended voice-design use: cfg_scale 3 with an instruction, so the
  unconditional prompt is ``--instruction`` positions shorter than the conditional one.
  ttscli's frame is ``breeze_tts.loop.generate_frames`` (both branches as one batch of two,
  one sync per frame). mlx-audio's is the body of ``Model.generate``'s frame loop (each branch
  its own batch-of-one forward in the backbone and in the depth decoder; it syncs twice per
  frame, reading codebook 0 and then the 15 depth codes back, as its loop does).
* ``backbone_step_ms``: next input + backbone step of every branch + heads + guidance +
  codebook-0 sampling, synced; ``depth_frame_ms``: the 15 codebooks with their sampling,
  synced. mlx-audio's loop already syncs at exactly those two points, so its split comes from
  the same run as its frames; ttscli's comes from a second pass that syncs after each part
  (``Branches`` and ``BreezeModel.depth_frame``, the objects its loop uses).
* ``prefill_ms``: the backbone over the prompt(s) (random embeddings of ``--prompt``
  positions; the unconditional one shorter by ``--instruction``), synced.

Figures: the median over rounds of each round's median, the first ``--warmup`` frames of
every round dropped. Both models get random weights at the real Breeze-TTS-2 dimensions
(``ttscli.models.breeze_tts.config.real_config``) in ``--dtype`` (float32 by default; ttscli
keeps its two heads in float32 as its loader does). Neither frame uses the text encoder (the
prompt is given as embeddings) nor the text embedding, so both are shrunk on both sides
(one encoder layer, a 512-row vocabulary) to save 4-6 GB per side in float32; everything the frame
touches is at full size. ``--layers`` shrinks the backbone and depth stacks of both sides
equally, ``--tiny`` shrinks every width too (a smoke test of the script, not a figure).
EOS is kept out of codebook 0 on both sides so that every round times ``--frames`` frames.
Also reported: ``rtf`` (frame time over the 80 ms of audio a frame holds, 12.5 Hz) and
``peak_above_weights_mb`` (MLX's peak memory during a frame pass above what was resident
before it: caches and activations, not the weights, given as ``weights_mb``).

Not here: time to first audio and the codec (``ttscli bench breeze-tts-2 --random-weights
--stream`` measures ours); mlx-audio's text encoder and prompt building.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ttscli  # noqa: F401  (preloads ttscli's BLAS before mlx, for both implementations)
import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ttscli.models.breeze_tts.config import real_config

CFG_SCALE = 3.0
PENALTY = 1.1       # upstream's default on codebook 0 (mlx-audio's generate() defaults to 1.0)
TEMPERATURE, TOP_K, TOP_P = 0.9, 50, 1.0


# ------------------------------------------------------------------ config and weights
def bench_config(layers: tuple[int, int] | None = None, tiny: bool = False) -> dict:
    """The real config, text encoder shrunk (unused per frame); ``layers`` = (backbone, depth)."""
    cfg = copy.deepcopy(real_config())
    te = cfg["text_encoder_config"]
    te.update(num_hidden_layers=1, layer_types=["full_attention"], vocab_size=512)
    b, d = cfg["backbone_config"], cfg["depth_decoder_config"]
    if tiny:
        H = 256
        b.update(hidden_size=H, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                 intermediate_size=768, num_hidden_layers=2)
        d.update(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 intermediate_size=384, num_hidden_layers=2, backbone_hidden_size=H, audio_embed_size=H)
        te.update(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                  intermediate_size=128)
        cfg.update(hidden_size=H, audio_embed_size=H)
    if layers is not None:
        b["num_hidden_layers"] = min(layers[0], b["num_hidden_layers"])
        d["num_hidden_layers"] = min(layers[1], d["num_hidden_layers"])
    return cfg


def fill_random(module: nn.Module, dtype, seed: int, keep_float32=()) -> None:
    """Random weights, one tensor at a time: a drawn pool tiled from a per-tensor offset (as
    ttscli's --random-weights does; drawing billions of normals takes minutes on a CPU). 1-D
    tensors (norm weights) keep their initial values."""
    pool = mx.random.normal((1 << 20,), key=mx.random.key(seed)) * 0.02
    out = []
    for i, (k, p) in enumerate(tree_flatten(module.parameters())):
        if p.ndim > 1:
            n = p.size
            p = mx.tile(mx.roll(pool, 7919 * i), -(-n // pool.size))[:n].reshape(p.shape)
        p = p.astype(mx.float32 if k in keep_float32 else dtype)
        mx.eval(p)
        out.append((k, p))
    module.update(tree_unflatten(out))


def nbytes(module: nn.Module) -> int:
    return sum(p.nbytes for _, p in tree_flatten(module.parameters()))


# ------------------------------------------------------------------ ttscli
def our_model(cfg: dict, dtype):
    from ttscli.lm import MLXCodeDecoder
    from ttscli.models.breeze_tts.config import ModelArgs
    from ttscli.models.breeze_tts.load import FLOAT32
    from ttscli.models.breeze_tts.model import BreezeModel

    model = BreezeModel(ModelArgs.from_dict(cfg, source="bench config"))
    fill_random(model, dtype, 0, keep_float32=FLOAT32)
    # as load_pipeline builds it (on a GPU this fuses the q/k/v and gate/up projections)
    return model, MLXCodeDecoder(model)


def our_prompts(cond_x, uncond_x):
    from ttscli.models.breeze_tts.prompt import Prompt

    cond = Prompt(cond_x, [], [])
    return cond, (Prompt(uncond_x, [], []) if uncond_x is not None else None)


def our_frames(model, decoder, cond_x, uncond_x, n_frames: int, seed: int) -> dict:
    """ttscli's own frame loop; seconds per frame and the prefill."""
    from ttscli.generate import Stats
    from ttscli.models.breeze_tts.config import GenerationConfig
    from ttscli.models.breeze_tts.loop import LoopConfig, generate_frames

    cfg = LoopConfig.from_generation_config(GenerationConfig(), max_frames=n_frames)
    cfg.ignore_eos = True
    cond, uncond = our_prompts(cond_x, uncond_x)
    st = Stats()
    codes = list(generate_frames(model, decoder, cond, uncond, CFG_SCALE if uncond is not None else None, cfg,
                                 seed=seed, stats=st))
    return {"frame_s": st.frame_s, "prefill_s": st.prefill_s, "codes": np.stack(codes)}


def our_parts(model, decoder, cond_x, uncond_x, n_frames: int, seed: int) -> dict:
    """The same frames split in two synced parts, with the objects, sampler and key sequence the
    loop uses (so the same seed gives the loop's codes, which the test checks)."""
    from ttscli.lm.sample import KeyStream, SamplingParams, logit_bias, sample
    from ttscli.models.breeze_tts.loop import Branches

    a = model.args
    V = a.vocab_size
    reserved = range(a.codebook_size, V)
    bias0 = logit_bias(V + 1, [*reserved, a.eos_id])[None]
    bias_d = logit_bias(V, reserved)[None]
    p0 = SamplingParams(TEMPERATURE, TOP_K, TOP_P, 0.0, PENALTY, True)
    pd = SamplingParams(TEMPERATURE, TOP_K, TOP_P, 0.0, 1.0, True)
    cond, uncond = our_prompts(cond_x, uncond_x)
    scale = CFG_SCALE if uncond is not None else None
    keys = KeyStream(seed)
    seen = mx.zeros((1, V + 1), dtype=mx.bool_)
    vocab = mx.arange(V + 1)[None]
    b = Branches(model, decoder, cond, uncond, scale)
    k = keys.take(16)
    c0 = sample(b.logits, p0, k[0], seen=seen, bias=bias0)
    mx.eval(c0, b.hidden)
    step_s, depth_s, frames = [], [], []
    for _ in range(n_frames):
        t0 = time.perf_counter()
        rest, _ = model.depth_frame(b.hidden, c0, lambda z, j, k=k: sample(z, pd, k[j], bias=bias_d), scale)
        mx.eval(rest)
        t1 = time.perf_counter()
        codes = mx.concatenate([c0[:, None], rest], axis=1)
        b.step(model.embed_frames(codes)[:, None, :])
        seen = mx.logical_or(seen, vocab == c0[:, None])
        k = keys.take(16)
        c0 = sample(b.logits, p0, k[0], seen=seen, bias=bias0)
        mx.eval(c0, b.hidden, seen)
        t2 = time.perf_counter()
        depth_s.append(t1 - t0)
        step_s.append(t2 - t1)
        frames.append(np.array(codes[0]))
    return {"step_s": step_s, "depth_s": depth_s, "codes": np.stack(frames)}


# ------------------------------------------------------------------ mlx-audio
def peer_model(cfg: dict, dtype):
    from mlx_audio.tts.models.breeze_tts.breeze_tts import Model
    from mlx_audio.tts.models.breeze_tts.config import ModelConfig

    m = Model(ModelConfig.from_dict(cfg))
    # the wrapper's text-token table (262158 x 2048) is never read by a frame
    m.embed_text_tokens = nn.Embedding(8, cfg["hidden_size"])
    fill_random(m, dtype, 1)
    # tied as its sanitize() ties them on load: one array, the depth decoder's
    m.backbone_model.embed_tokens.embed_audio_tokens.weight = m.depth_decoder.model.embed_tokens.weight
    mx.eval(m.parameters())
    return m


def peer_frames(m, cond_x, uncond_x, n_frames: int, seed: int) -> dict:
    """The body of mlx-audio's ``Model.generate`` frame loop (its prefill, then per frame: heads,
    guidance, penalty, mask, ``_sample``, ``_depth_tokens``, the next backbone step of each
    branch), without the codec. The one change: ``_sample(allow_eos=False)`` keeps EOS out so
    every round runs ``n_frames`` frames (a slice, the same cost)."""
    mx.random.seed(seed)
    use_cfg = uncond_x is not None
    t0 = time.perf_counter()
    cond_cache = m.backbone_model.make_cache()
    cond_hidden = m.backbone_model(input_embeddings=cond_x, cache=cond_cache)[:, -1, :]
    uncond_hidden = None
    if use_cfg:
        uncond_cache = m.backbone_model.make_cache()
        uncond_hidden = m.backbone_model(input_embeddings=uncond_x, cache=uncond_cache)[:, -1, :]
    mx.eval([h for h in (cond_hidden, uncond_hidden) if h is not None])
    prefill_s = time.perf_counter() - t0
    frames: list[list[int]] = []
    frame_s, step_s, depth_s = [], [], []
    for _ in range(n_frames):
        t0 = time.perf_counter()
        cond_logits = m.lm_head(cond_hidden)
        if use_cfg:
            uncond_logits = m.lm_head(uncond_hidden)
            logits = uncond_logits + CFG_SCALE * (cond_logits - uncond_logits)
        else:
            logits = cond_logits
        logits = m._apply_repetition_penalty(logits, [f[0] for f in frames], PENALTY)
        logits = m._mask_reserved_codec_logits(logits)
        first = m._sample(logits, temperature=TEMPERATURE, top_p=TOP_P, top_k=TOP_K, allow_eos=False)
        t1 = time.perf_counter()
        frame = m._depth_tokens(first, cond_hidden, unconditional_hidden=uncond_hidden,
                                cfg_scale=CFG_SCALE if use_cfg else 1.0, temperature=TEMPERATURE,
                                top_p=TOP_P, top_k=TOP_K)
        t2 = time.perf_counter()
        frames.append(frame)
        codebooks = mx.array(frame, dtype=mx.int32)[None, None, :]
        cond_hidden = m.backbone_model(input_ids=codebooks, cache=cond_cache)[:, -1, :]
        if use_cfg:
            uncond_hidden = m.backbone_model(input_ids=codebooks, cache=uncond_cache)[:, -1, :]
        t3 = time.perf_counter()
        frame_s.append(t3 - t0)
        depth_s.append(t2 - t1)
        # its backbone step is built lazily at the end of one frame and run by the next one's
        # _sample: the step's share is the frame less the depth decoder, in steady state
        step_s.append((t1 - t0) + (t3 - t2))
    return {"frame_s": frame_s, "step_s": step_s, "depth_s": depth_s, "prefill_s": prefill_s,
            "codes": np.array(frames, dtype=np.int32)}


# ------------------------------------------------------------------ driver
def parse_layers(s: str | None) -> tuple[int, int] | None:
    if not s:
        return None
    try:
        parts = [int(x) for x in s.split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < 1:
        raise SystemExit(f"--layers: expected N or BACKBONE,DEPTH (positive integers), got {s!r}")
    return (parts[0], parts[1] if len(parts) == 2 else min(parts[0], 12))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=12, help="frames per round (default 12)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per side (default 3)")
    ap.add_argument("--warmup", type=int, default=2, help="frames dropped at the start of each round (default 2)")
    ap.add_argument("--prompt", type=int, default=120, help="conditional prompt positions (default 120)")
    ap.add_argument("--instruction", type=int, default=24,
                    help="positions the instruction adds: the unconditional prompt is this much shorter (default 24)")
    ap.add_argument("--only", choices=["both", "ours", "mlx-audio"], default="both")
    ap.add_argument("--no-cfg", action="store_true", help="one branch, no guidance (plain or clone mode)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32",
                    help="weights of both sides (ttscli's two heads stay float32)")
    ap.add_argument("--layers", default=None, help="N or BACKBONE,DEPTH: shrink both stacks of both sides")
    ap.add_argument("--tiny", action="store_true", help="tiny widths too (smoke test, not a figure)")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    a = ap.parse_args(argv)
    if a.frames <= a.warmup or a.rounds < 1:
        raise SystemExit(f"--frames must exceed --warmup ({a.warmup}) and --rounds must be >= 1")
    if a.prompt < 2 or (not a.no_cfg and not 1 <= a.instruction < a.prompt):
        raise SystemExit("--prompt must be >= 2 and --instruction within 1 .. --prompt - 1")
    layers = parse_layers(a.layers)
    if a.only != "ours":
        try:
            import mlx_audio.tts.models.breeze_tts  # noqa: F401
        except ImportError as e:
            raise SystemExit(f"mlx-audio is not importable here ({e}); run with its venv's python, "
                             "or pass --only ours") from None
    cfg = bench_config(layers, a.tiny)
    dtype = getattr(mx, a.dtype)
    ours = theirs = None
    weights_mb = {}
    if a.only != "mlx-audio":
        ours = our_model(cfg, dtype)
        weights_mb["ours"] = nbytes(ours[0]) / 2**20
    if a.only != "ours":
        theirs = peer_model(cfg, dtype)
        weights_mb["mlx_audio"] = (nbytes(theirs) - theirs.depth_decoder.model.embed_tokens.weight.nbytes) / 2**20
    H = cfg["hidden_size"]
    cond_x = mx.random.normal((1, a.prompt, H), key=mx.random.key(7)) * 0.1
    uncond_x = None if a.no_cfg else cond_x[:, a.instruction:]
    cond_x, uncond_x = cond_x.astype(dtype), (None if uncond_x is None else uncond_x.astype(dtype))
    mx.eval([x for x in (cond_x, uncond_x) if x is not None])

    w = a.warmup
    raw = {s: {"frame": [], "step": [], "depth": [], "prefill": [], "peak_mb": []} for s in ("ours", "mlx_audio")}

    def measured(side, fn, *args):
        base = mx.get_active_memory()
        mx.reset_peak_memory()
        out = fn(*args)
        raw[side]["peak_mb"].append((mx.get_peak_memory() - base) / 2**20)
        return out

    for r in range(a.rounds):
        if ours is not None:
            f = measured("ours", our_frames, *ours, cond_x, uncond_x, a.frames, r)
            p = our_parts(*ours, cond_x, uncond_x, a.frames, r)
            raw["ours"]["frame"].append(float(np.median(f["frame_s"][w:])) * 1e3)
            raw["ours"]["prefill"].append(f["prefill_s"] * 1e3)
            raw["ours"]["step"].append(float(np.median(p["step_s"][w:])) * 1e3)
            raw["ours"]["depth"].append(float(np.median(p["depth_s"][w:])) * 1e3)
        if theirs is not None:
            f = measured("mlx_audio", peer_frames, theirs, cond_x, uncond_x, a.frames, r)
            raw["mlx_audio"]["frame"].append(float(np.median(f["frame_s"][w:])) * 1e3)
            raw["mlx_audio"]["prefill"].append(f["prefill_s"] * 1e3)
            raw["mlx_audio"]["step"].append(float(np.median(f["step_s"][w:])) * 1e3)
            raw["mlx_audio"]["depth"].append(float(np.median(f["depth_s"][w:])) * 1e3)
        print(json.dumps({"round": r, **{s: {k: round(v[-1], 2) for k, v in d.items() if v}
                                         for s, d in raw.items() if d["frame"]}}), file=sys.stderr, flush=True)

    from ttscli import _blas

    b, d = cfg["backbone_config"], cfg["depth_decoder_config"]
    res = {
        "device": str(mx.default_device()), "blas": _blas.name(), "mlx": mx.__version__,
        "dtype": a.dtype, "cfg": None if a.no_cfg else CFG_SCALE,
        "prompt_positions": [a.prompt] + ([] if a.no_cfg else [a.prompt - a.instruction]),
        "frames": a.frames, "rounds": a.rounds, "warmup_dropped": w,
        "dims": {"backbone_layers": b["num_hidden_layers"], "backbone_hidden": b["hidden_size"],
                 "depth_layers": d["num_hidden_layers"], "depth_hidden": d["hidden_size"],
                 "tiny": a.tiny, "text_encoder": "shrunk (1 layer, 512 rows): unused per frame"},
        "weights_mb": {k: round(v, 1) for k, v in weights_mb.items()},
    }
    for side, d_ in raw.items():
        if not d_["frame"]:
            continue
        res[side] = {"frame_ms": float(np.median(d_["frame"])), "backbone_step_ms": float(np.median(d_["step"])),
                     "depth_frame_ms": float(np.median(d_["depth"])), "prefill_ms": float(np.median(d_["prefill"])),
                     "rtf": float(np.median(d_["frame"])) / 80.0,
                     "peak_above_weights_mb": float(max(d_["peak_mb"])), "per_round_frame_ms": d_["frame"]}
    if "ours" in res and "mlx_audio" in res:
        res["mlx_audio_over_ours"] = {k: res["mlx_audio"][k] / res["ours"][k]
                                      for k in ("frame_ms", "backbone_step_ms", "depth_frame_ms", "prefill_ms")}
    text = json.dumps(res, indent=1)
    print(text)
    if a.out is not None:
        a.out.write_text(text + "\n")
    return res


if __name__ == "__main__":
    main()
