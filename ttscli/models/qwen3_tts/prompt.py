"""Talker prompts for every Qwen3-TTS mode, laid out exactly as the reference builds them.

Every talker position is the sum of a text track ``T(ids) = text_projection(text_embedding(ids))``
and a codec track ``C(ids) = codec_embedding(ids)`` (or a speaker vector).  The prefill is

    [T(instruct)] | T(role) | ([tts_pad]*(K-2) | tts_bos) + codec[:K-1] | body

with ``codec = C(think.., [lang], think_eos) | [speaker] | C(pad, bos)`` and ``body`` one of:
streaming ``T(t1) + C(bos)`` (the rest of the text trails, one token per frame, then
``tts_eos``), non-streaming ``(T(text) | tts_eos) + C(pad) , tts_pad + C(bos)``, or for an
in-context clone the reference text+target text against ``C(bos) | ref frames``.

Inputs are token ids, reference codes and an x-vector, so a prompt can be built and checked
without any audio model.  Defaults follow the reference wrapper: non-streaming text for
CustomVoice and VoiceDesign, streaming for voice clone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import mlx.core as mx

from ttscli.errors import UsageError
from ttscli.models.qwen3_tts.config import ModelArgs
from ttscli.models.qwen3_tts.talker import Talker


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def ref_text_template(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


@dataclass
class Prompt:
    embeds: mx.array            # [1, T, H] prefill
    trailing: mx.array          # [1, N, H] text track for decode steps 0..N-1
    tts_pad: mx.array           # [1, 1, H] text track once trailing runs out
    ref_codes: mx.array | None = None   # [Tref, 16] ICL reference codes (decoder left context)

    def text_at(self, step: int) -> mx.array:
        return self.trailing[:, step:step + 1] if step < self.trailing.shape[1] else self.tts_pad


def language_id(args: ModelArgs, language: str | None, speaker: str | None = None) -> int | None:
    """Codec language id (None for "auto"); a dialect speaker overrides chinese/auto."""
    t = args.talker_config
    lang = (language or "auto").lower()
    if lang != "auto" and lang not in t.codec_language_id:
        raise UsageError(f"unsupported language {language!r}; choose one of: {', '.join(args.languages)}")
    lid = None if lang == "auto" else t.codec_language_id[lang]
    if speaker and lang in ("chinese", "auto"):
        dialect = t.spk_is_dialect.get(speaker.lower(), False)
        if dialect:
            lid = t.codec_language_id[dialect]
    return lid


def speaker_id(args: ModelArgs, speaker: str) -> int:
    spk = args.talker_config.spk_id
    if speaker.lower() not in spk:
        raise UsageError(f"unknown voice {speaker!r}; this model has: {', '.join(sorted(spk)) or 'none'}")
    return spk[speaker.lower()]


def _ids(x: Sequence[int]) -> mx.array:
    return mx.array(list(x), dtype=mx.int32)[None]


def build_prompt(talker: Talker, args: ModelArgs, text_ids: Sequence[int], *,
                 language: str | None = "auto", speaker: str | None = None,
                 instruct_ids: Sequence[int] | None = None, x_vector: mx.array | None = None,
                 ref_codes: mx.array | None = None, ref_ids: Sequence[int] | None = None,
                 non_streaming: bool = False) -> Prompt:
    """Prefill embeddings for one request.

    ``text_ids``: tokens of :func:`assistant_text`; ``instruct_ids``: of :func:`instruct_text`;
    ``ref_ids``: of :func:`ref_text_template`.  ``speaker`` (CustomVoice) and ``x_vector``
    (Base, ``[H]``) fill the speaker slot; ``ref_codes [Tref, 16]`` with ``ref_ids`` selects the
    in-context clone layout.  No validation of mode compatibility here: see :func:`prepare`.
    """
    t = args.talker_config
    T, C = talker.embed_text, talker.embed_codec
    dtype = talker.model.codec_embedding.weight.dtype
    ids = _ids(text_ids)
    tts_bos, tts_eos, tts_pad = mx.split(T(_ids([args.tts_bos_token_id, args.tts_eos_token_id,
                                                 args.tts_pad_token_id])), 3, axis=1)
    lid = language_id(args, language, speaker)
    think = ([t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id] if lid is None else
             [t.codec_think_id, t.codec_think_bos_id, lid, t.codec_think_eos_id])
    codec = [C(_ids(think))]
    if speaker:
        codec.append(C(_ids([speaker_id(args, speaker)])))
    elif x_vector is not None:
        codec.append(x_vector.astype(dtype).reshape(1, 1, -1))
    codec.append(C(_ids([t.codec_pad_id, t.codec_bos_id])))
    codec = mx.concatenate(codec, axis=1)
    K = codec.shape[1]

    parts = []
    if instruct_ids is not None:
        parts.append(T(_ids(instruct_ids)))
    parts.append(T(ids[:, :3]))
    pads = mx.broadcast_to(tts_pad, (1, K - 2, tts_pad.shape[-1]))
    parts.append(mx.concatenate([pads, tts_bos], axis=1) + codec[:, :-1])

    if ref_codes is not None:
        body, trailing = _icl_body(talker, args, ids, ref_ids, ref_codes, tts_eos, tts_pad, non_streaming)
        parts.append(body)
    elif non_streaming:
        text = mx.concatenate([T(ids[:, 3:-5]), tts_eos], axis=1)
        parts.append(text + C(_ids([t.codec_pad_id] * text.shape[1])))
        parts.append(tts_pad + C(_ids([t.codec_bos_id])))
        trailing = tts_pad
    else:
        parts.append(T(ids[:, 3:4]) + codec[:, -1:])
        trailing = mx.concatenate([T(ids[:, 4:-5]), tts_eos], axis=1)
    return Prompt(mx.concatenate(parts, axis=1), trailing, tts_pad, ref_codes)


def _icl_body(talker: Talker, args: ModelArgs, ids: mx.array, ref_ids, ref_codes: mx.array,
              tts_eos: mx.array, tts_pad: mx.array, non_streaming: bool) -> tuple[mx.array, mx.array]:
    t = args.talker_config
    if ref_ids is None:
        raise UsageError("in-context voice clone needs the reference transcript (--ref-text)")
    text = talker.embed_text(mx.concatenate([_ids(ref_ids)[:, 3:-2], ids[:, 3:-5]], axis=1))
    text = mx.concatenate([text, tts_eos], axis=1)
    frames = talker.embed_frame(ref_codes.astype(mx.int32))[None]
    codec = mx.concatenate([talker.embed_codec(_ids([t.codec_bos_id])), frames], axis=1)
    n_text, n_codec = text.shape[1], codec.shape[1]
    if non_streaming:
        body = mx.concatenate([text + talker.embed_codec(_ids([t.codec_pad_id] * n_text)),
                               codec + tts_pad], axis=1)
        return body, tts_pad
    if n_text > n_codec:
        return text[:, :n_codec] + codec, text[:, n_codec:]
    pad = mx.broadcast_to(tts_pad, (1, n_codec - n_text, tts_pad.shape[-1]))
    return mx.concatenate([text, pad], axis=1) + codec, tts_pad


@dataclass
class VoicePrompt:
    """What a clone needs from the reference audio; saved voices store exactly this."""

    x_vector: mx.array                   # [enc_dim] speaker-encoder output
    ref_codes: mx.array | None = None    # [Tref, 16]; None: x-vector-only
    ref_text: str | None = None
    ref_ids: list[int] | None = None     # tokens of ref_text_template(ref_text), when saved

    @property
    def icl(self) -> bool:
        return self.ref_codes is not None


def prepare(talker: Talker, args: ModelArgs, tokenizer, text: str, *, language: str | None = None,
            speaker: str | None = None, instruct: str | None = None, voice: VoicePrompt | None = None,
            non_streaming: bool | None = None) -> Prompt:
    """Validate a request against the checkpoint's mode, tokenize, and build its prompt."""
    kind = args.tts_model_type
    instruct = instruct or None
    if kind == "custom_voice":
        if not speaker:
            raise UsageError(f"this model needs a preset voice (--voice); it has: {', '.join(args.speakers)}")
        speaker_id(args, speaker)
        if instruct and not args.supports_instruct:
            raise UsageError("instruct is not supported by the 0.6B CustomVoice model; use a 1.7B CustomVoice "
                             "model or drop --instruct")
    elif kind == "voice_design":
        if not instruct:
            raise UsageError("VoiceDesign models need a voice description (--instruct)")
        if speaker:
            raise UsageError("VoiceDesign models have no preset voices; describe the voice with --instruct")
    else:
        if voice is None:
            raise UsageError("Base models clone a voice: give reference audio (--ref) or a saved voice file")
        if instruct:
            raise UsageError("Base (clone) models do not take --instruct")
        if speaker:
            raise UsageError("Base models have no preset voices; clone one with --ref")
    language_id(args, language, speaker)
    if non_streaming is None:
        non_streaming = kind != "base"
    text_ids = tokenizer.encode(assistant_text(text))
    instruct_ids = tokenizer.encode(instruct_text(instruct)) if instruct else None
    ref_ids = None
    if voice is not None and voice.icl:
        if voice.ref_ids is not None:
            ref_ids = voice.ref_ids
        elif not voice.ref_text:
            raise UsageError("in-context voice clone needs the reference transcript (--ref-text), "
                             "or use x-vector-only mode")
        else:
            ref_ids = tokenizer.encode(ref_text_template(voice.ref_text))
    return build_prompt(talker, args, text_ids, language=language, speaker=speaker if kind == "custom_voice" else None,
                        instruct_ids=instruct_ids, x_vector=voice.x_vector if voice is not None else None,
                        ref_codes=voice.ref_codes if voice is not None else None, ref_ids=ref_ids,
                        non_streaming=non_streaming)
