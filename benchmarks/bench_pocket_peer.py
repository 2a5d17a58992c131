"""Upstream Pocket TTS (pocket-tts 4.0.1, PyTorch) timed as `ttscli bench pocket-tts --peer
pocket-tts` times ours: run by ttscli.models.pocket_tts.bench with the python of an environment
holding pocket-tts and torch ($TTSCLI_POCKET_PYTHON); reads {"text", "repeats", "frames",
"threads"} as JSON on stdin and prints one JSON line of figures.

The model is upstream's TTSModel built from its english.yaml at the real size, with random
weights (nothing is downloaded): upstream's tokenizer file is replaced by UTF-8 bytes, as ttscli's
random-weights run reads text, so both prompts have the same length; there is no voice prompt on
either side; upstream's EOS is disabled and its frame budget set to ``frames``, so both sides
generate the same number of frames. Upstream pins torch to one thread at import (its design:
generation and Mimi decoding run on two threads); ``threads`` overrides that when given.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import torch


class ByteTokenizer:
    """UTF-8 bytes as token ids (upstream's tokenizer interface)."""

    def __init__(self, *args, **kwargs):
        pass

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, tokens: list[int]) -> str:
        return bytes(tokens).decode("utf-8", "replace")

    def __call__(self, text: str) -> torch.Tensor:
        return torch.tensor(self.encode(text))[None, :]


def build(frames: int):
    import pocket_tts.modules.text_conditioner as conditioner
    from pocket_tts.models.mimi import build_mimi
    from pocket_tts.models.tts_model import TTSModel, stamp_state_names
    from pocket_tts.utils.config import CONFIGS_DIR, load_config

    conditioner.build_tokenizer = lambda n_bins, path, kind="sentencepiece": ByteTokenizer()
    cfg = load_config(CONFIGS_DIR / "english.yaml")
    tts = TTSModel._from_pydantic_config(cfg, temp=cfg.default_temperature, sampler_decode_steps=1,
                                         noise_clamp=None, eos_threshold=1e9, origin=None)
    tts.flow_lm.speaker_proj_weight = torch.nn.Parameter(torch.zeros(cfg.flow_lm.transformer.d_model, 32))
    tts.mimi = build_mimi(cfg.mimi)
    stamp_state_names(tts)
    with torch.no_grad():
        for p in tts.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, p[0].numel() ** -0.5)
    tts.eval()
    tts._estimate_max_gen_len = lambda token_count: frames
    return tts


def run(tts, text: str, frames: int) -> dict:
    from pocket_tts.modules.stateful_module import init_states

    state = init_states(tts.flow_lm, batch_size=1, sequence_length=0)
    steps: list[float] = []
    inner = tts._run_flow_lm_and_increment_step

    def timed(*a, **kw):
        t = time.perf_counter()
        out = inner(*a, **kw)
        steps.append(time.perf_counter() - t)
        return out

    tts._run_flow_lm_and_increment_step = timed
    t0, c0 = time.perf_counter(), time.process_time()
    first, n = None, 0
    for chunk in tts.generate_audio_stream(state, text, frames_after_eos=0):
        if first is None:
            first = time.perf_counter() - t0
        n += chunk.shape[-1]
    total = time.perf_counter() - t0
    del tts._run_flow_lm_and_increment_step
    frame_s = sorted(steps[1:])      # the first call is the text prefill
    return {"total_s": total, "cpu_s": time.process_time() - c0, "first_audio_s": first,
            "audio_s": n / tts.sample_rate, "frames": len(frame_s),
            "frame_ms_p50": 1e3 * statistics.median(frame_s) if frame_s else None}


def main() -> None:
    args = json.loads(sys.stdin.read())
    import logging

    logging.disable(logging.WARNING)
    tts = build(args["frames"])
    if args.get("threads"):
        torch.set_num_threads(int(args["threads"]))
    with torch.no_grad():
        run(tts, args["text"], args["frames"])                          # warm-up
        runs = [run(tts, args["text"], args["frames"]) for _ in range(max(1, args["repeats"]))]
    med = {k: float(statistics.median(r[k] for r in runs)) for k in runs[0] if runs[0][k] is not None}
    med["rtf"] = med["total_s"] / med["audio_s"]
    med["torch_threads"] = torch.get_num_threads()
    print(json.dumps(med))


if __name__ == "__main__":
    main()
