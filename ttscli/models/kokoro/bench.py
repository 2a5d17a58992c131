"""Bench hooks: the stage times of the last run, and the published int8 graph on onnxruntime as a peer."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError


def bench_components(pipe, req) -> dict:
    s = pipe.stats
    return {"phonemize_s": s.extra.get("phonemize_s"), "prosody_s": s.extra.get("prosody_s"),
            "decoder_s": s.decoder_s, "pieces": s.extra.get("pieces")}


def bench_peer(spec, checkpoint: Path | None, text: str, repeats: int, threads: int | None = None) -> dict:
    """``ttscli bench kokoro-82m --peer onnxruntime``: the published int8 graph under onnxruntime
    (as kokoro-onnx runs it) on the same phonemes, voice row and speed as ours."""
    import os

    try:
        import onnxruntime as ort
    except ImportError as err:
        raise UsageError("onnxruntime is not installed: pip install onnxruntime") from err
    from ttscli.text import chunk_text

    from .g2p import phonemize
    from .load import (
        checkpoint_or_default,
        converted_cache,
        default_voices,
        describe,
        load_voices,
        onnx_path_of,
        parse_voice,
        read_vocab,
        style_row,
    )
    from .pipeline import _JA_SCRIPT, KokoroPipeline, pick_voice, split_phonemes, tokens_of

    checkpoint = checkpoint_or_default(checkpoint)
    path = onnx_path_of(checkpoint, converted_cache(spec))
    vocab = read_vocab(describe(checkpoint)["vocab"])
    voices = load_voices(checkpoint)
    lang = "ja" if _JA_SCRIPT.search(text) else "en"
    pack, _ = parse_voice(pick_voice(voices, *default_voices(spec), lang), voices)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or os.cpu_count() or 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def run():
        n, first, t0 = 0, None, time.perf_counter()
        for chunk in chunk_text(text, KokoroPipeline.max_chunk_chars):
            for piece in split_phonemes(phonemize(chunk, lang)):
                toks = tokens_of(piece, vocab)
                out = sess.run(None, {"tokens": np.array([toks], np.int64),
                                      "style": style_row(pack, len(piece))[None].astype(np.float32),
                                      "speed": np.array([1.0], np.float32)})[0]
                n += out.size
                if first is None:
                    first = time.perf_counter() - t0
        return n, first

    run()                                                              # warm-up
    runs = []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        n, first = run()
        total = time.perf_counter() - t0
        runs.append({"total_s": total, "cpu_s": time.process_time() - c0, "first_audio_s": first,
                     "audio_s": n / 24000})
    med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
    med["rtf"] = med["total_s"] / med["audio_s"]
    return med
