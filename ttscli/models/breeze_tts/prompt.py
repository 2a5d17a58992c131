"""Backbone prompts, laid out as upstream's templates (breeze_infer/templates.py).

T(s): ``s`` tokenized with its <bos>, encoded by the text encoder on its own, then projected.
A(codes): one position per reference frame, the sum of its 16 codebook embeddings. EOSF: the
all-``codebook_eos`` frame at the ``<|audio_eos|>`` position.

============  =======================================================  ==============================
mode          conditional prompt                                        unconditional (CFG) prompt
============  =======================================================  ==============================
plain         T([S0] text)                                              none
design        T([S0]<ins_bos>instruction<ins_eos>text)                  T([S0] text)
clone         T([S0] ref_text) A(ref) EOSF T([S0] text)                 none
direction     T([S0] ref_text) A(ref) EOSF T([S0]<ins_bos>...text)      the clone prompt
============  =======================================================  ==============================

Text is passed through untouched: vocal events such as ``(laugh)`` or ``[笑]`` are part of it.
CFG other than 1 on a mode without an unconditional prompt is an error, as upstream raises;
a scale of 0 runs the unconditional prompt alone (upstream's shortcut).
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from ttscli.errors import UsageError

SPEAKER = "[S0]"
INS_BOS, INS_EOS = "<ins_bos>", "<ins_eos>"


@dataclass
class Voice:
    """A clone reference: its codes ``[N, 16]`` and transcript."""

    codes: np.ndarray
    text: str


@dataclass
class Prompt:
    embeds: mx.array                  # [1, L, H]
    ids: list[int]                    # token-id view; audio frames as audio_token_id, EOSF as audio_eos_token_id
    segments: list[list[int]]         # the text segments, each encoded alone


def mode_of(instruct: str | None, voice: Voice | None) -> str:
    if voice is None:
        return "design" if instruct else "plain"
    return "direction" if instruct else "clone"


def layouts(text: str, instruct: str | None, voice: Voice | None) -> tuple[list, list | None]:
    """(conditional parts, unconditional parts or None); a part is a string or ``"audio"``."""
    target = f"{SPEAKER}{INS_BOS}{instruct}{INS_EOS}{text}" if instruct else f"{SPEAKER}{text}"
    plain = [f"{SPEAKER}{text}"]
    if voice is None:
        return [target], (plain if instruct else None)
    ref = [f"{SPEAKER}{voice.text}", "audio"]
    return ref + [target], (ref + plain if instruct else None)


def build(model, tokenizer, parts: list, voice: Voice | None) -> Prompt:
    a = model.args
    pieces, ids, segments = [], [], []
    for p in parts:
        if p == "audio":
            codes = np.asarray(voice.codes, np.int32)
            eos = np.full((1, a.num_codebooks), a.codebook_eos_token_id, np.int32)
            pieces.append(model.embed_frames(mx.array(np.concatenate([codes, eos]))))
            ids += [a.audio_token_id] * len(codes) + [a.audio_eos_token_id]
        else:
            seg = tokenizer.encode(p)
            segments.append(seg)
            ids += seg
            pieces.append(model.encode_text(seg))
    return Prompt(mx.concatenate(pieces, axis=0)[None], ids, segments)


def prompts(model, tokenizer, text: str, instruct: str | None, voice: Voice | None,
            cfg_scale: float) -> tuple[Prompt, Prompt | None, float | None]:
    """(prompt, unconditional prompt or None, CFG scale or None when there is no guidance)."""
    instruct = instruct or None
    cond, uncond = layouts(text, instruct, voice)
    if cfg_scale != 1.0 and uncond is None:
        what = "voice clone" if voice is not None else "plain TTS"
        raise UsageError(f"--cfg-scale {cfg_scale:g} needs an instruction (--instruct): {what} has no "
                         "unconditional prompt to guide against (use --cfg-scale 1)")
    if cfg_scale == 1.0:
        return build(model, tokenizer, cond, voice), None, None
    if cfg_scale == 0.0:   # the unconditional prompt alone
        return build(model, tokenizer, uncond, voice), None, None
    return build(model, tokenizer, cond, voice), build(model, tokenizer, uncond, voice), cfg_scale
