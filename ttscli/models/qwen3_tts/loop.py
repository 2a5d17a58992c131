"""Frame loop: talker step -> codebook 0 -> code predictor (codebooks 1..15) -> next input.

The talker sits behind :class:`ttscli.lm.CodeDecoder` so a Core ML talker can replace the MLX
one; the embeddings, the code predictor and sampling stay in MLX.  Sampling runs on device and
the loop syncs with the host once per frame (to test codebook 0 for EOS).

Sampling follows the reference ``generate``: repetition penalty on previously generated
codebook-0 ids, control ids 2048.. (except EOS) suppressed, EOS blocked for the first
``min_new_tokens`` frames, then temperature / top-k / top-p; the sub-talker has its own
temperature / top-k / top-p and no penalty.  Reaching ``max_frames`` before EOS raises
:class:`GenerationError` (never truncated audio).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import mlx.core as mx
import numpy as np

from ttscli.errors import GenerationError, LimitReached, UsageError
from ttscli.lm import CodeDecoder
from ttscli.lm.sample import KeyStream, SamplingParams, logit_bias, sample
from ttscli.models.base import Stats
from ttscli.models.qwen3_tts.config import GenerationConfig
from ttscli.models.qwen3_tts.prompt import Prompt
from ttscli.models.qwen3_tts.talker import Talker


@dataclass
class LoopConfig:
    talker: SamplingParams
    sub: SamplingParams
    max_frames: int
    min_new_tokens: int = 2
    ignore_eos: bool = False     # bench with random weights: always run max_frames, no error

    @classmethod
    def from_generation_config(cls, g: GenerationConfig, overrides: dict | None = None,
                               max_frames: int | None = None) -> "LoopConfig":
        """Defaults from generation_config.json; ``overrides`` may set temperature, top_k, top_p,
        min_p, repetition_penalty, do_sample and the same with a ``subtalker_`` prefix."""
        o = {k.replace("dosample", "do_sample"): v for k, v in (overrides or {}).items() if v is not None}
        if "max_new_tokens" in o:
            mf = o.pop("max_new_tokens")
            max_frames = mf if max_frames is None else max_frames
        known = {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "do_sample"}
        bad = sorted(k for k in o if k.removeprefix("subtalker_") not in known)
        if bad:
            raise UsageError(f"unknown sampling option(s) {', '.join(bad)}; Qwen3-TTS takes "
                             f"{', '.join(sorted(known))} and the same with a subtalker_ prefix")
        talker = SamplingParams(g.temperature, g.top_k, g.top_p, 0.0, g.repetition_penalty, g.do_sample)
        sub = SamplingParams(g.subtalker_temperature, g.subtalker_top_k, g.subtalker_top_p, 0.0, 1.0,
                             g.subtalker_dosample)
        sub_o = {k[len("subtalker_"):]: v for k, v in o.items() if k.startswith("subtalker_")}
        talker = talker.merged({k: v for k, v in o.items() if not k.startswith("subtalker_")}).validate("sampling")
        sub = sub.merged(sub_o).validate("sub-talker sampling")
        mf = max_frames if max_frames is not None else g.max_new_tokens
        if mf < 1:
            raise GenerationError(f"max_frames must be >= 1, got {mf}")
        return cls(talker, sub, mf)


def c0_sampler(talker: Talker, params: SamplingParams, compiled: bool, owner: object = None):
    """``(logits, key, bias[, seen]) -> (c0, its embedding[, seen with c0])``: codebook 0 drawn
    on device.  ``compiled`` (with a compiled code decoder, i.e. on a GPU) traces it once with
    its fixed shapes, so the penalty, filters, draw and embedding replay as a few fused kernels;
    the trace is kept on ``owner`` (the decoder) so later utterances do not trace again."""
    kept = owner.__dict__.setdefault("_c0_samplers", {}) if compiled and owner is not None else {}
    if params in kept:
        return kept[params]
    vocab = mx.arange(talker.args.vocab_size)[None]

    def pick(logits, key, bias, *seen):
        c0 = sample(logits, params, key, seen=seen[0] if seen else None, bias=bias)
        out = (c0, talker.embed_codec(c0))
        return out + ((mx.logical_or(seen[0], vocab == c0[:, None]),) if seen else ())

    if not compiled:
        return pick
    kept[params] = mx.compile(pick)
    return kept[params]


def generate_frames(talker: Talker, decoder: CodeDecoder, prompt: Prompt, cfg: LoopConfig, *,
                    seed: int | None = None, stats: Stats | None = None) -> Iterator[np.ndarray]:
    """Yield each frame's 16 codes (``int32 [16]``) until EOS.

    Raises GenerationError when ``cfg.max_frames`` frames were produced without EOS.
    """
    a = talker.args
    V = a.vocab_size
    eos = a.codec_eos_token_id
    suppressed = [i for i in range(V - 1024, V) if i != eos]
    bias_open = logit_bias(V, suppressed + ([eos] if cfg.ignore_eos else []))[None]
    bias_closed = logit_bias(V, suppressed + [eos])[None]
    keys = KeyStream(seed)
    cp = talker.code_predictor
    greedy_sub = cfg.sub.greedy
    # an ONNX code decoder runs the predictor's frame too (its compiled_frame has the same shape)
    cp_frame = (decoder if hasattr(decoder, "compiled_frame") else cp).compiled_frame(cfg.sub)
    use_penalty = cfg.talker.repetition_penalty != 1.0
    seen = mx.zeros((1, V), dtype=mx.bool_) if use_penalty else None
    pick = c0_sampler(talker, cfg.talker, compiled=getattr(decoder, "compiled", False), owner=decoder)

    t0 = time.perf_counter()
    cache = decoder.new_cache()
    logits, hidden = decoder.prefill(prompt.embeds, cache)
    mx.eval(logits, hidden)
    if stats is not None:
        stats.prefill_tokens = prompt.embeds.shape[1]
        stats.prefill_s = time.perf_counter() - t0

    for s in range(cfg.max_frames):
        t_frame = time.perf_counter()
        k = keys.take(16)
        bias = bias_closed if s < cfg.min_new_tokens else bias_open
        c0, c0_embed, *seen_next = pick(logits, k[0], bias, *([seen] if use_penalty else []))
        if greedy_sub:
            rest, frame_embed = cp_frame(hidden, c0_embed)
        else:
            rest, frame_embed = cp_frame(hidden, c0_embed, k[1:])
        codes = mx.concatenate([c0[:, None], rest], axis=1)[0]
        nxt = frame_embed[:, None, :] + prompt.text_at(s)
        # Queue the next talker step before waiting, so graph building overlaps the predictor.
        logits, hidden = decoder.step(nxt, cache)
        mx.async_eval(codes, logits, hidden)
        if use_penalty:
            seen = seen_next[0]
        out = np.array(codes)
        if stats is not None:
            stats.frame_s.append(time.perf_counter() - t_frame)
        if int(out[0]) == eos:
            return
        if stats is not None:
            stats.frames += 1
        yield out
    if cfg.ignore_eos:
        return
    # Exactly max_frames frames followed by EOS is a complete utterance, not an overrun.
    last = sample(logits, cfg.talker, keys.next(), seen=seen, bias=bias_open)
    if int(last.item()) == eos:
        return
    raise LimitReached(f"reached max frames ({cfg.max_frames}, {cfg.max_frames / 12.5:.1f} s of audio) "
                          "before end of speech; raise --max-frames or shorten the text chunk")


def frame_kernels(talker: Talker, decoder: CodeDecoder, sub: SamplingParams, talker_params: SamplingParams,
                  embeds: mx.array) -> dict[str, int]:
    """Kernels one frame of :func:`generate_frames` runs (see :func:`ttscli.lm.graph_primitives`):
    sampling codebook 0, its embedding, the code predictor's frame, the next input and the
    next talker step, built lazily after a prefill of ``embeds [1, T, H]`` and counted, whole
    and by part."""
    from ttscli.lm import graph_primitives

    cache = decoder.new_cache()
    logits, hidden = decoder.prefill(embeds, cache)
    mx.eval(logits, hidden, [getattr(c, "state", []) for c in cache] if isinstance(cache, list) else [])
    # one step first, so a compiled step's trace and the cache's storage already exist
    logits, hidden = decoder.step(embeds[:, -1:], cache)
    mx.eval(logits, hidden, [getattr(c, "state", []) for c in cache] if isinstance(cache, list) else [])
    keys = KeyStream(0).take(16)
    cp_frame = (decoder if hasattr(decoder, "compiled_frame") else talker.code_predictor).compiled_frame(sub)
    V = talker.args.vocab_size
    pick = c0_sampler(talker, talker_params, compiled=getattr(decoder, "compiled", False))
    _, c0_embed, seen = pick(logits, keys[0], mx.zeros((1, V)), mx.zeros((1, V), dtype=mx.bool_))
    sampling = graph_primitives(c0_embed, seen)
    mx.eval(c0_embed, seen)
    rest, frame_embed = cp_frame(hidden, c0_embed) if sub.greedy else cp_frame(hidden, c0_embed, keys[1:])
    predictor = graph_primitives(rest, frame_embed)
    mx.eval(rest, frame_embed)
    logits, hidden = decoder.step(frame_embed[:, None, :] + embeds[:, -1:], cache)
    step = graph_primitives(logits, hidden)
    mx.eval(logits, hidden)
    return {"kernels_per_frame": sampling["kernels"] + predictor["kernels"] + step["kernels"],
            "kernels_talker_step": step["kernels"], "kernels_code_predictor_frame": predictor["kernels"],
            "kernels_sampling": sampling["kernels"],
            "primitives_per_frame": sampling["primitives"] + predictor["primitives"] + step["primitives"]}
