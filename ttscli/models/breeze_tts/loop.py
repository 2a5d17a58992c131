"""Frame loop: backbone -> codebook 0 (or EOS) -> depth decoder (codebooks 1..15) -> next input.

Sampling follows upstream's streaming path: logits in float32; with CFG ``u + s * (c - u)``;
repetition penalty on the codebook-0 ids generated so far; reserved ids (codebook_size ..
vocab_size - 1) masked, the EOS class kept; temperature, top-k, top-p, draw. The depth decoder
samples with its own settings and no penalty, from a fresh cache each frame; with CFG its
conditional and unconditional rows run as one batch of two and share the sampled tokens.

CFG's two backbone branches (each its own prompt, positions and cache) are prefilled one by one
and then stepped together as one batch (:class:`ttscli.lm.batch.RowBatch`: the shorter prompt
left-padded and masked). A converted backbone (Core ML, onnxruntime) takes one row per call: there
the decoder is a :class:`ttscli.backends.decoder.RowwiseDecoder` and each branch keeps its own state.
A code decoder with a ``depth_frame`` (onnxruntime) runs the depth decoder too.

Stopping: the EOS class, never emitted. ``max_frames`` frames without it is a GenerationError,
not truncated audio.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import mlx.core as mx
import numpy as np

from ttscli.errors import InputTooLongError, LimitReached, UsageError
from ttscli.lm.sample import KeyStream, SamplingParams, logit_bias, sample
from ttscli.models.base import Stats
from ttscli.models.breeze_tts.config import GenerationConfig
from ttscli.models.breeze_tts.prompt import Prompt

SAMPLING = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "do_sample")


@dataclass
class LoopConfig:
    backbone: SamplingParams
    depth: SamplingParams
    max_frames: int
    ignore_eos: bool = False

    @classmethod
    def from_generation_config(cls, g: GenerationConfig, knobs: dict | None = None,
                               max_frames: int | None = None) -> "LoopConfig":
        """Defaults from generation_config.json and upstream's runtime; ``knobs`` may set the
        sampling knobs and the same with a ``depth_`` prefix (the depth decoder's)."""
        o = {k: v for k, v in (knobs or {}).items() if v is not None}
        backbone = SamplingParams(g.temperature, g.top_k, g.top_p, 0.0, g.repetition_penalty, g.do_sample)
        depth = SamplingParams(g.depth_decoder_temperature, g.depth_decoder_top_k, g.depth_decoder_top_p,
                               0.0, 1.0, g.do_sample)
        backbone = backbone.merged({k: v for k, v in o.items() if k in SAMPLING}).validate("sampling")
        # one do_sample switch for both stages (greedy decoding means greedy codes throughout)
        depth = depth.merged({**({"do_sample": o["do_sample"]} if "do_sample" in o else {}),
                              **{k[len("depth_"):]: v for k, v in o.items() if k.startswith("depth_")}}
                             ).validate("depth-decoder sampling")
        mf = max_frames if max_frames is not None else g.max_new_tokens
        if mf < 1:
            raise UsageError(f"--max-frames must be >= 1, got {mf}")
        return cls(backbone, depth, mf)


class Branches:
    """The backbone side of one utterance: one prompt, or CFG's two stepped as one batch.
    ``logits [1, V + 1]`` (guided) and ``hidden [rows, H]`` are those of the latest position."""

    def __init__(self, model, decoder, cond: Prompt, uncond: Prompt | None, scale: float | None):
        self.model, self.decoder, self.scale = model, decoder, scale
        self.rows = None
        if uncond is None:
            self.cache = decoder.new_cache()
            self.logits, self.hidden = decoder.prefill(cond.embeds, self.cache)
            return
        from ttscli.backends.decoder import RowwiseDecoder

        if isinstance(decoder, RowwiseDecoder):
            self.cache = decoder.new_cache()
            logits, self.hidden = decoder.prefill_rows([cond.embeds, uncond.embeds], self.cache)
            self.logits = self.guide(logits)
            return
        from ttscli.lm.batch import RowBatch

        caches, hidden = [], []
        for p in (cond, uncond):
            c = model.new_cache()
            _, h = model(p.embeds, c)
            mx.eval(h, [x.state for x in c])
            caches.append(c)
            hidden.append(h)
        self.rows = RowBatch(model.backbone_model)
        self.rows.join(caches)
        self.hidden = mx.concatenate(hidden, axis=0)
        self.logits = self.guide(model.head(self.hidden))

    def guide(self, z: mx.array) -> mx.array:
        return z[1:2] + self.scale * (z[0:1] - z[1:2])

    def step(self, embed: mx.array) -> None:
        """Feed one frame's summed embedding ``[1, 1, H]`` to every branch."""
        if self.scale is None:
            self.logits, self.hidden = self.decoder.step(embed, self.cache)
            return
        both = mx.broadcast_to(embed, (2, *embed.shape[1:]))
        if self.rows is None:
            logits, self.hidden = self.decoder.step(both, self.cache)
            self.logits = self.guide(logits)
            return
        self.hidden = self.rows.step(both)
        self.logits = self.guide(self.model.head(self.hidden))


def check_context(model, cond: Prompt, uncond: Prompt | None, max_frames: int) -> None:
    """The backbone's positions must hold the prompt plus every frame: refuse up front."""
    limit = model.args.max_positions
    longest = max(p.embeds.shape[1] for p in (cond, uncond) if p is not None)
    if longest + max_frames > limit:
        raise InputTooLongError(f"the prompt ({longest} positions) plus --max-frames {max_frames} exceeds the "
                                f"backbone's context of {limit} positions; shorten the text or reference, "
                                "or lower --max-frames")


def generate_frames(model, decoder, cond: Prompt, uncond: Prompt | None, scale: float | None, cfg: LoopConfig,
                    *, seed: int | None = None, stats: Stats | None = None,
                    trace: list | None = None) -> Iterator[np.ndarray]:
    """Yield each frame's 16 codes (``int32 [16]``) until the EOS class. ``trace`` (parity, tests)
    collects each frame's guided backbone logits and depth-decoder logits."""
    a = model.args
    V, eos = a.vocab_size, a.eos_id
    reserved = range(a.codebook_size, V)
    bias0 = logit_bias(V + 1, [*reserved, *([eos] if cfg.ignore_eos else [])])[None]
    bias_d = logit_bias(V, reserved)[None]
    check_context(model, cond, uncond, cfg.max_frames)
    keys = KeyStream(seed)
    use_penalty = cfg.backbone.repetition_penalty != 1.0
    seen = mx.zeros((1, V + 1), dtype=mx.bool_)
    vocab = mx.arange(V + 1)[None]

    # a converted code decoder may run the depth decoder too (onnxruntime)
    depth_frame = getattr(decoder, "depth_frame", model.depth_frame)
    t0 = time.perf_counter()
    b = Branches(model, decoder, cond, uncond, scale)
    mx.eval(b.logits, b.hidden)
    if stats is not None:
        stats.prefill_tokens = sum(p.embeds.shape[1] for p in (cond, uncond) if p is not None)
        stats.prefill_s = time.perf_counter() - t0

    for _ in range(cfg.max_frames):
        t_frame = time.perf_counter()
        k = keys.take(16)
        c0 = sample(b.logits, cfg.backbone, k[0], seen=seen if use_penalty else None, bias=bias0)
        if int(c0.item()) == eos:
            if stats is not None:
                stats.frame_s.append(time.perf_counter() - t_frame)
            return
        def pick(z, j, k=k):
            return sample(z, cfg.depth, k[j], bias=bias_d)

        rest, depth_logits = depth_frame(b.hidden, c0, pick, scale)
        if trace is not None:
            trace.append((b.logits, depth_logits))
        codes = mx.concatenate([c0[:, None], rest], axis=1)
        b.step(model.embed_frames(codes)[:, None, :])
        seen = mx.logical_or(seen, vocab == c0[:, None])
        mx.async_eval(codes, b.logits, b.hidden, seen)
        out = np.array(codes[0])
        if stats is not None:
            stats.frame_s.append(time.perf_counter() - t_frame)
            stats.frames += 1
        yield out
    if cfg.ignore_eos:
        return
    # exactly max_frames frames followed by EOS is a whole utterance, not an overrun
    last = sample(b.logits, cfg.backbone, keys.next(), seen=seen if use_penalty else None, bias=bias0)
    if int(last.item()) == eos:
        return
    raise LimitReached(f"reached --max-frames {cfg.max_frames} ({cfg.max_frames / 12.5:.1f} s of audio) before "
                          "the end of speech; raise --max-frames or shorten the text chunk")
