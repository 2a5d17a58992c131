"""Where the Piper voice's time goes: our MLX stages against onnxruntime on the same graph cut.

The published ONNX graph is cut at the decoder's input (``/Mul_7_output_0``, the latent
frames) into a front (text encoder, durations, prior sample, flow) and the decoder
(HiFi-GAN); our model runs the same two halves. Both run the bench text sentence by
sentence, alternated run by run, best of ``--rounds``, with one or two threads:

    .venv/bin/python benchmarks/piper_stage_times.py --threads 2
    .venv/bin/python benchmarks/piper_stage_times.py --threads 1

``--threads 1`` gives each side one core (our decoder's block queue off, BLAS on one thread;
onnxruntime's intra-op pool of one), which shows per-core efficiency; ``--threads 2`` is how
both run by default, which shows how well each uses the second core. Needs onnx and
onnxruntime (test extras).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import ttscli  # noqa: F401  (loads the BLAS before mlx)

import mlx.core as mx
import numpy as np

DECODER_INPUT = "/Mul_7_output_0"


def _cut(onnx_path: Path, folder: Path) -> tuple[Path, Path]:
    import onnx.utils

    front, dec = folder / "front.onnx", folder / "decoder.onnx"
    onnx.utils.extract_model(str(onnx_path), str(front), ["input", "input_lengths", "scales"],
                             [DECODER_INPUT], check_model=False)
    onnx.utils.extract_model(str(onnx_path), str(dec), [DECODER_INPUT], ["output"], check_model=False)
    return front, dec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, choices=(1, 2), default=2)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()

    import onnxruntime as ort

    from ttscli import _blas
    from ttscli.models.base import LoadOptions
    from ttscli.models.piper import default_voice_dir, find_onnx, load_pipeline
    from ttscli.models.piper.phonemize import text_to_ids

    # the text the earlier stage-time figures were measured on
    DEFAULT_TEXT = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins "
                    "with a single step, and every long road starts somewhere.")
    os.environ["TTSCLI_PIPER_THREADS"] = str(args.threads)
    if args.threads == 1:
        _blas.set_num_threads(1)
    voice = default_voice_dir()
    pipe = load_pipeline(SimpleNamespace(id="piper-joe", sample_rate=None, defaults={}), voice, LoadOptions())
    model, cfg = pipe.model, pipe.settings(SimpleNamespace(sampling={}, speed=None))
    sentences = text_to_ids(DEFAULT_TEXT, pipe.id_map, pipe.espeak_voice)

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    with tempfile.TemporaryDirectory() as tmp:
        front_path, dec_path = _cut(find_onnx(voice), Path(tmp))
        ort_front = ort.InferenceSession(str(front_path), opts, providers=["CPUExecutionProvider"])
        ort_dec = ort.InferenceSession(str(dec_path), opts, providers=["CPUExecutionProvider"])

    scales = np.array([cfg["noise_scale"], cfg["length_scale"], cfg["noise_w"]], dtype=np.float32)
    feeds = [{"input": np.array([ids], dtype=np.int64), "input_lengths": np.array([len(ids)], dtype=np.int64),
              "scales": scales} for ids in sentences]

    def ours_front():
        key, zs = mx.random.key(0), []
        for ids in sentences:
            key, k_dur, k_prior = mx.random.split(key, 3)
            m_p, logs_p, frames = model.durations(mx.array([ids]), cfg["noise_w"], cfg["length_scale"], k_dur)
            zs.append(model.latents(m_p, logs_p, frames, cfg["noise_scale"], k_prior))
            mx.eval(zs[-1])
        return zs

    latents = ours_front()
    ort_latents = [np.ascontiguousarray(np.array(z).transpose(0, 2, 1)) for z in latents]

    def ours_decoder():
        for z in latents:
            mx.eval(model.decode(z))

    def ort_front_run():
        for f in feeds:
            ort_front.run(None, f)

    def ort_decoder_run():
        for z in ort_latents:
            ort_dec.run(None, {DECODER_INPUT: z})

    runs = {"front ttscli": ours_front, "front onnxruntime": ort_front_run,
            "decoder ttscli": ours_decoder, "decoder onnxruntime": ort_decoder_run}
    best = {k: (float("inf"), float("inf")) for k in runs}
    for fn in runs.values():
        fn()                                            # warm-up
    for _ in range(args.rounds):
        for name, fn in runs.items():
            w, c = time.perf_counter(), time.process_time()
            fn()
            w, c = time.perf_counter() - w, time.process_time() - c
            best[name] = (min(best[name][0], w), min(best[name][1], c))
    frames = sum(int(z.shape[1]) for z in latents)
    print(f"{len(sentences)} sentences, {frames} latent frames, {args.threads} thread(s), "
          f"BLAS {_blas.name()}, best of {args.rounds}")
    print(f"{'stage':22s} {'wall ms':>8s} {'cpu ms':>8s}")
    for name, (w, c) in best.items():
        print(f"{name:22s} {w * 1e3:8.1f} {c * 1e3:8.1f}")
    for stage in ("front", "decoder"):
        print(f"{stage}: ttscli / onnxruntime wall = "
              f"{best[f'{stage} ttscli'][0] / best[f'{stage} onnxruntime'][0]:.2f}x")


if __name__ == "__main__":
    main()
