"""Chatterbox components, ttscli vs mlx-audio 0.6.2, same shapes, same process, interleaved, CPU time.

On a shared machine wall-clock figures of two runs made minutes apart measure the load more
than the code; this times each component of both implementations back to back in one process
and reports the CPU seconds of this process (all its threads) as well as wall seconds.
mlx-audio is NOT a dependency: run this file with the python of a scratch venv holding it
(ttscli is imported from the checkout; see ttscli/models/chatterbox/bench.py):

    TTSCLI_BLAS=/work/main/.venv/lib/libmkl_rt.so.3 PYTHONPATH=. /tmp/mavenv/bin/python \\
        scripts/bench_chatterbox_peer.py [--tokens 50] [--steps 8] [--rounds 2]

Components: a T3 decode step (CFG batch of two, 30-layer Llama-520M, float32), the S3Gen flow
(encoder + 10 Euler steps of the CFM with CFG) on ``--tokens`` tokens after a 100-token prompt,
and HiFT on the resulting mel. Random weights at the published shapes on both sides.
"""
from __future__ import annotations

import argparse
import json
import time

import ttscli  # noqa: F401  (loads the BLAS before mlx)
import mlx.core as mx
import numpy as np


def timed(fn):
    c, w = time.process_time(), time.perf_counter()
    mx.eval(fn())
    return time.process_time() - c, time.perf_counter() - w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--steps", type=int, default=8, help="T3 decode steps timed per round")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()

    from mlx_audio.tts.models.chatterbox.chatterbox import Model
    from mlx_audio.tts.models.chatterbox.config import ModelConfig
    from mlx_lm.models.cache import make_prompt_cache

    from ttscli.lm.decoder import MLXCodeDecoder
    from ttscli.models.chatterbox.load import load_t3
    from ttscli.models.chatterbox.bench import _randomize
    from ttscli.codecs.s3gen import load_s3gen

    theirs = Model(ModelConfig())
    _randomize(theirs)
    t3 = load_t3(None, random_weights=True)
    s3 = load_s3gen(None, random_weights=True)
    rng = np.random.default_rng(0)
    n = 100
    ref = {"prompt_token": rng.integers(0, 6561, (1, n)).astype(np.int32), "prompt_token_len": np.array([n]),
           "prompt_feat": rng.standard_normal((1, 2 * n, 80)).astype(np.float32),
           "embedding": rng.standard_normal((1, 192)).astype(np.float32)}
    toks = rng.integers(0, 6561, a.tokens).astype(np.int32)
    prefill = mx.random.normal((2, 150, 1024)) * 0.1

    def ours_t3():
        dec = MLXCodeDecoder(t3)
        cache = dec.new_cache()
        mx.eval(dec.prefill(prefill, cache))
        e = mx.random.normal((2, 1, 1024)) * 0.1
        return lambda: dec.step(e, cache)[0]

    def their_t3():
        m = theirs.t3
        cache = make_prompt_cache(m.tfmr)
        mx.eval(m.tfmr.model(inputs=None, input_embeddings=prefill, cache=cache))
        e = mx.random.normal((2, 1, 1024)) * 0.1
        return lambda: m.speech_head(m.tfmr.model(inputs=None, input_embeddings=e, cache=cache)[:, -1:])

    def ours_flow():
        return s3.mel(toks, ref, key=mx.random.key(0))

    their_ref = {"prompt_token": mx.array(ref["prompt_token"]), "prompt_token_len": mx.array([n]),
                 "prompt_feat": mx.array(ref["prompt_feat"]), "prompt_feat_len": None,
                 "embedding": mx.array(ref["embedding"])}

    def their_flow():
        return theirs.s3gen.flow.inference(token=mx.array(toks)[None], token_len=mx.array([a.tokens]),
                                           finalize=True, **their_ref)[0]

    mel = ours_flow()
    mx.eval(mel)
    their_mel = mx.array(np.array(mel).T[None])

    def ours_hift():
        return s3.mel2wav(mel, key=mx.random.key(1))[0]

    def their_hift():
        return theirs.s3gen.mel2wav.inference(speech_feat=their_mel, cache_source=mx.zeros((1, 1, 0)))[0]

    res: dict[str, list] = {}
    for r in range(a.rounds + 1):              # round 0 warms both up
        for side, mk in (("ttscli", ours_t3), ("mlx-audio", their_t3)):
            step = mk()
            runs = [timed(step) for _ in range(a.steps)]
            if r:
                res.setdefault(f"t3_step/{side}", []).append(np.median(runs, axis=0).tolist())
        for side, fl, hi in (("ttscli", ours_flow, ours_hift), ("mlx-audio", their_flow, their_hift)):
            f, h = timed(fl), timed(hi)
            if r:
                res.setdefault(f"flow/{side}", []).append(list(f))
                res.setdefault(f"hift/{side}", []).append(list(h))
        print(f"round {r} done", flush=True)
    audio_s = a.tokens / 25
    out = {}
    for k, v in res.items():
        cpu, wall = np.min(v, axis=0)
        out[k] = {"cpu_s": cpu, "wall_s": wall}
        if not k.startswith("t3"):
            out[k].update(cpu_s_per_audio_s=cpu / audio_s, wall_s_per_audio_s=wall / audio_s)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
