"""Pocket TTS at the real size (random weights), stage by stage: the text prefill, one flow-LM
step, the flow head, and one Mimi decoder frame split into its upsample + transformer and its
SEANet. Each stage is synced and timed alone; medians of wall and process CPU time are printed
(on a shared machine the CPU time says what a stage costs, the wall time what it waited).

    .venv/bin/python benchmarks/pocket_stages.py --tokens 44 --frames 30 --threads 1

``PYTHONPATH`` at another checkout times that checkout's code with the same script.
"""
from __future__ import annotations

import argparse
import statistics
import time

import ttscli  # noqa: F401  (first: the BLAS preload must come before mlx)
import mlx.core as mx
import numpy as np

from ttscli import _blas
from ttscli.lm import MLXCodeDecoder
from ttscli.models.pocket_tts.flow_lm import lsd_decode
from ttscli.models.pocket_tts.load import random_model


def timed(fn, repeats: int) -> tuple[float, float]:
    """Median (wall ms, CPU ms) of ``repeats`` synced calls after two untimed ones."""
    for _ in range(2):
        mx.eval(fn())
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        mx.eval(fn())
        wall.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=44, help="text prompt length")
    ap.add_argument("--frames", type=int, default=30, help="timed calls per stage")
    ap.add_argument("--threads", type=int, default=0, help="BLAS threads (0: the BLAS's default)")
    args = ap.parse_args()
    if args.threads:
        _blas.set_num_threads(args.threads)
    model = random_model()
    mx.eval(model.parameters())
    lm, mimi = model.flow_lm, model.mimi
    dec = MLXCodeDecoder(lm, compiled=False)
    tokens = mx.array(np.arange(args.tokens, dtype=np.int32)[None] % lm.args.n_bins)

    def prefill():
        cache = dec.new_cache()
        return dec.prefill(lm.text_embeddings(tokens), cache)[1], cache

    rows = {"prefill": timed(lambda: prefill()[0], max(3, args.frames // 5))}
    cache = prefill()[1]
    latent = mx.random.normal((1, 1, model.args.latent_dim))

    def step():
        for c in cache:
            c.offset = args.tokens      # the same position every call: the cache does not grow
        return dec.step(lm.latent_embeddings(latent), cache)[1]

    rows["LM step"] = timed(step, args.frames)
    hidden, noise = mx.random.normal((1, lm.args.d_model)), mx.random.normal((1, model.args.latent_dim))
    rows["flow head"] = timed(lambda: lsd_decode(lm.flow_net, hidden, noise, 1), args.frames)
    stream = mimi.new_stream()
    rows["Mimi frame"] = timed(lambda: mimi.decode(latent, stream), args.frames)
    inner = mimi._decoder
    emb = mimi.quantizer.output_proj(latent)
    rows["  upsample + transformer"] = timed(
        lambda: inner.decoder_transformer(inner.upsample(emb, stream), stream.attention), args.frames)
    seanet_in = inner.decoder_transformer(inner.upsample(emb, stream), stream.attention)
    mx.eval(seanet_in)
    rows["  SEANet"] = timed(lambda: inner.decoder(seanet_in, stream), args.frames)
    print(f"Pocket TTS stages, real size, random weights; BLAS {_blas.name()}, "
          f"threads {args.threads or 'default'}, prefill of {args.tokens} tokens")
    print("| stage | wall ms (median) | CPU ms (median) |\n|---|---|---|")
    for name, (wall, cpu) in rows.items():
        print(f"| {name} | {wall:.1f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
