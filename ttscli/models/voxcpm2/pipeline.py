"""VoxCPM2 pipeline: request -> prompt (text, optional reference and continuation audio) ->
latent patches -> 48 kHz audio.

Upstream: voxcpm/core.py (``VoxCPM._generate``) and model/voxcpm2.py (``build_prompt_cache``,
``_generate_with_prompt_cache``, ``_inference``). The modes map onto the request as follows:

- ``speak TEXT``: zero-shot, ``tokens(text) + [audio start]``.
- ``--instruct DESC`` (voice design, and style control of a clone): upstream's CLI spelling,
  ``"(DESC)TEXT"``; refused with a continuation prompt, as upstream's CLI refuses ``--control``
  with ``--prompt-text``.
- ``clone --ref A`` alone: the isolated reference, ``[ref start] + patches(A) + [ref end]``
  before the text.
- ``clone --ref A --ref-text T``: upstream's "ultimate cloning", the same recording as the
  reference and as the continuation prompt (``tokens(T + text)``, then A's patches, which the
  generated audio continues); ``--no-ref-prefix`` leaves the reference prefix out (upstream's
  plain continuation mode).

Each patch is drawn by the diffusion head from seeded noise and decoded by one causal AudioVAE
stream, so streamed chunks join to the one-shot audio. In continuation the stream is first fed
the prompt's last patches (up to three, as upstream decodes them before cutting their audio
off), so the first generated samples join the prompt as they do upstream.
"""
from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import mlx.core as mx
import numpy as np

from ttscli.errors import AudioInputError, GenerationError, UsageError
from ttscli.lm.sample import KeyStream
from ttscli.models.base import Pipeline, Request
from ttscli.voicefile import is_voice_file

from .generate import Prompt, patches, prefill

AUDIO_START, REF_START, REF_END = 101, 103, 104
INFERENCE_TIMESTEPS = 10
CFG_VALUE = 2.0
MIN_PATCHES = 2                 # the stop head is read only past this many patches (upstream's min_len)
# upstream's patch budget: the target text's tokens times 6, plus 10, at most 4096
PATCHES_PER_TOKEN = 6
EXTRA_PATCHES = 10
MAX_PATCHES = 4096
STREAM_CONTEXT = 3              # prompt patches decoded before a continuation (streaming_prefix_len - 1)
VOICE_FORMAT = "voxcpm2-voice"


@dataclass
class Plan:
    """One request's generation: its prompt, patch budget, diffusion steps and guidance."""

    prompt: Prompt
    limit: int
    steps: int
    cfg: float
    min_len: int                # the stop head is read only past this many patches


@dataclass
class VoicePrompt:
    """A clone's encoded audio: ``ref`` patches ``[R, P, D]`` (the isolated reference), and for
    continuation ``prompt`` patches ``[M, P, D]`` with their transcript."""

    ref: np.ndarray | None = None
    prompt: np.ndarray | None = None
    prompt_text: str = ""


def normalize_text(text: str) -> str:
    """Upstream's only text clean-up: newlines to spaces, runs of whitespace to one space."""
    return re.sub(r"\s+", " ", text.replace("\n", " "))


class VoxCPM2Pipeline(Pipeline):
    # upstream generates a whole text in one pass (budget 6 patches per token); the engine's
    # sentence chunks keep each pass far below the 8192-position cache
    max_chunk_chars = 300
    independent_generations = True    # caches, key stream and decoder stream live in each generation

    def __init__(self, spec: Any, model, tokenizer, lm_backend: str = "mlx", dit_backend: str = "mlx",
                 encoder_backend: str = "mlx"):
        super().__init__()
        self.spec = spec
        self.model = model
        self.tokenizer = tokenizer
        vae = model.args.vae
        self.sample_rate = vae.out_sample_rate
        self.ref_sample_rate = vae.sample_rate
        self.backends = {"lm": lm_backend, "flow_estimator": dit_backend, "patch_encoder": encoder_backend,
                         "speech_decoder": "mlx"}
        self._voices: dict[str, VoicePrompt] = {}

    @property
    def args(self):
        return self.model.args

    @property
    def patch_samples(self) -> int:
        """Reference samples (at ``ref_sample_rate``) per latent patch."""
        return self.args.patch_size * self.args.vae.hop

    # ---------------------------------------------------------------- voices
    def encode_audio(self, wav: np.ndarray, pad: str) -> np.ndarray:
        """16 kHz audio, padded to whole patches on the ``pad`` side -> patches ``[T, P, D]``."""
        n = -len(wav) % self.patch_samples
        wav = np.pad(wav, (n, 0) if pad == "left" else (0, n))
        feats = np.array(self.model.audio_vae.encode(mx.array(wav[None])).astype(mx.float32))[0]
        return feats.reshape(-1, self.args.patch_size, self.args.feat_dim)

    def voice_prompt(self, r: Request) -> VoicePrompt | None:
        if r.ref_audio is None:
            if r.save_voice:
                raise UsageError("--save-voice needs reference audio (--ref) to encode")
            if r.voice and not is_voice_file(r.voice):
                raise UsageError(f"VoxCPM2 has no preset voice {r.voice!r}: --voice takes a file saved with "
                                 "`ttscli clone --save-voice`, or describe a voice with --instruct")
            return read_voice(Path(r.voice), self.args) if r.voice else None
        if r.voice:
            raise UsageError("give either a saved voice (--voice) or reference audio (--ref), not both")
        wav = np.asarray(r.ref_audio, np.float32).reshape(-1)
        if r.ref_sample_rate and r.ref_sample_rate != self.ref_sample_rate:
            import soxr

            wav = soxr.resample(wav, r.ref_sample_rate, self.ref_sample_rate).astype(np.float32)
        if wav.size < self.args.vae.hop:
            ms = 1000 * self.args.vae.hop / self.ref_sample_rate
            raise AudioInputError(f"the reference audio is shorter than one AudioVAE frame ({ms:g} ms)")
        prefix = bool(r.knobs.get("ref_prefix", True))
        if not prefix and not r.ref_text:
            raise UsageError("--no-ref-prefix leaves a continuation prompt only: give --ref-text too")
        key = hashlib.blake2b(wav.tobytes() + (r.ref_text or "").encode() + bytes([prefix]),
                              digest_size=16).hexdigest()
        if key not in self._voices:
            self._voices = {key: VoicePrompt(
                ref=self.encode_audio(wav, "right") if prefix else None,
                prompt=self.encode_audio(wav, "left") if r.ref_text else None,
                prompt_text=r.ref_text or "")}
        voice = self._voices[key]
        if r.save_voice:
            save_voice(Path(r.save_voice), voice)
        return voice

    # ---------------------------------------------------------------- prompt
    def prompt(self, text: str, voice: VoicePrompt | None) -> Prompt:
        """Upstream's layout: [ref start, ref patches, ref end] if a reference, the text tokens
        and the audio start token, then the continuation patches if any."""
        P, D = self.args.patch_size, self.args.feat_dim
        prompt_text = voice.prompt_text if voice is not None and voice.prompt is not None else ""
        ids = self.tokenizer.encode(prompt_text + text) + [AUDIO_START]
        tokens, feats, is_text = [ids], [np.zeros((len(ids), P, D), np.float32)], [np.ones(len(ids))]
        if voice is not None and voice.ref is not None:
            n = len(voice.ref)
            z = np.zeros((1, P, D), np.float32)
            tokens.insert(0, [REF_START] + [0] * n + [REF_END])
            feats.insert(0, np.concatenate([z, voice.ref, z]))
            is_text.insert(0, np.concatenate([[1.0], np.zeros(n), [1.0]]))
        if voice is not None and voice.prompt is not None:
            n = len(voice.prompt)
            tokens.append([0] * n)
            feats.append(voice.prompt)
            is_text.append(np.zeros(n))
        text_mask = np.concatenate(is_text)[None].astype(np.float32)
        return Prompt(mx.array(np.concatenate(tokens)[None].astype(np.int32)), mx.array(text_mask),
                      mx.array(np.concatenate(feats)[None]), mx.array(1.0 - text_mask))

    def request_text(self, r: Request, voice: VoicePrompt | None) -> str:
        text = normalize_text(r.text)
        if r.instruct is None:
            return text
        if voice is not None and voice.prompt is not None:
            raise UsageError("--instruct cannot go with a continuation prompt (--ref-text); upstream refuses "
                             "its --control with --prompt-text too: drop one")
        return f"({normalize_text(r.instruct).strip()}){text}"

    # ---------------------------------------------------------------- generation
    def noise(self, keys: KeyStream) -> mx.array:
        """One patch's starting noise ``[1, P, D]`` (upstream: torch.randn per patch)."""
        return mx.random.normal((1, self.args.patch_size, self.args.feat_dim), key=keys.next())

    def plan(self, r: Request, voice: VoicePrompt | None) -> Plan:
        """The request's prompt, patch budget and diffusion settings, its refusals checked."""
        text = self.request_text(r, voice)
        target = len(self.tokenizer.encode(text))
        if target == 0:
            raise UsageError("the text has no tokens")
        p = self.prompt(text, voice)
        limit = r.max_frames or min(target * PATCHES_PER_TOKEN + EXTRA_PATCHES, MAX_PATCHES)
        context, what = self.args.max_length, "VoxCPM2's"
        converted = self.model.converted_stacks
        if converted is not None and getattr(converted[0], "capacity", context) < context:
            context, what = converted[0].capacity, "the Core ML packages'"
        room = context - p.tokens.shape[1]
        if limit > room:
            raise UsageError(f"the prompt ({p.tokens.shape[1]} positions) and {limit} patches exceed {what} "
                             f"{context}-position context: shorten the reference or lower --max-frames")
        return Plan(p, limit, int(r.knobs.get("inference_timesteps", INFERENCE_TIMESTEPS)),
                    float(r.knobs.get("cfg_value", CFG_VALUE)), int(r.knobs.get("min_len", MIN_PATCHES)))

    def latents(self, r: Request, voice: VoicePrompt | None) -> Iterator[mx.array]:
        """Latent patches ``[1, P, D]`` until the stop head ends the utterance."""
        plan = self.plan(r, voice)
        p, limit = plan.prompt, plan.limit
        keys = KeyStream(r.seed)
        t = time.perf_counter()
        pre = prefill(self.model, p)
        mx.eval(pre.lm_hidden, pre.residual_hidden)
        self.stats.prefill_tokens = p.tokens.shape[1]
        self.stats.prefill_s = time.perf_counter() - t
        t = time.perf_counter()
        stopped = False
        for i, (patch, stop) in enumerate(patches(self.model, p, lambda _: self.noise(keys), steps=plan.steps,
                                                  cfg_value=plan.cfg, min_len=limit if r.ignore_eos else plan.min_len,
                                                  max_len=limit, pre=pre)):
            now = time.perf_counter()
            self.stats.frame_s.append(now - t)       # one patch: the diffusion head, then both LMs' step
            t = now
            self.stats.frames += 1
            stopped = i > plan.min_len and int(stop[0].argmax()) == 1
            yield patch
        if not stopped and not r.ignore_eos:
            raise GenerationError(limit_message(limit))

    def decode_stream(self, voice: VoicePrompt | None):
        """A fresh AudioVAE stream for one generation; in continuation first fed the prompt's
        last patches, so the first generated samples join the prompt."""
        from ttscli.codecs.audiovae import DecodeStream

        stream = DecodeStream(self.model.audio_vae)
        if voice is not None and voice.prompt is not None:
            ctx = voice.prompt[-STREAM_CONTEXT:]
            mx.eval(stream.push(mx.array(ctx.reshape(1, -1, self.args.feat_dim))))
        return stream

    def decode(self, stream, pending: list[mx.array]) -> np.ndarray:
        """Patches ``[1, P, D]`` each, in order, through ``stream`` -> their samples."""
        t = time.perf_counter()
        z = mx.concatenate(pending, axis=1).astype(mx.float32)
        audio = np.array(stream.push(z)[0], dtype=np.float32)
        self.stats.decoder_s += time.perf_counter() - t
        self.stats.decoder_frames += len(pending)
        return audio

    def generate(self, r: Request) -> Iterator[np.ndarray]:
        t_start = time.perf_counter()
        voice = self.voice_prompt(r)
        stream = self.decode_stream(voice)
        pending: list[mx.array] = []
        emitted = 0
        for patch in self.latents(r, voice):
            pending.append(patch)
            if r.stream and len(pending) >= decode_group(r, emitted):
                audio = self.decode(stream, pending)
                pending.clear()
                emitted += 1
                if self.stats.first_audio_s is None:
                    self.stats.first_audio_s = time.perf_counter() - t_start
                yield audio
        if pending:
            audio = self.decode(stream, pending)
            if self.stats.first_audio_s is None:
                self.stats.first_audio_s = time.perf_counter() - t_start
            yield audio

    def rows(self):
        """Requests as rows of one batch (ttscli.models.voxcpm2.rows): one forward of both LMs
        per patch for every row, the diffusion head over the rows, each row's own noise, stop
        and AudioVAE stream. With the LMs on onnxruntime or Core ML (their MLX layers freed)
        requests go one at a time."""
        if self.model.converted_stacks is not None:
            return None
        from .rows import VoxCPM2Rows

        return VoxCPM2Rows(self)


def decode_group(r: Request, emitted: int) -> int:
    """Patches decoded together in a streamed request: ``first_chunk_frames`` for its first
    chunk, then ``chunk_frames``."""
    return (r.first_chunk_frames or 1) if emitted == 0 else r.chunk_frames


def limit_message(limit: int) -> str:
    return f"VoxCPM2 reached {limit} patches without its stop (raise --max-frames if the text is that long)"


def save_voice(path: Path, voice: VoicePrompt) -> Path:
    """A clone's encoded reference (and continuation prompt with its transcript) as a voice file,
    so ``--voice FILE`` skips encoding the recording again."""
    from ttscli import voicefile

    tensors = {name: arr for name, arr in (("ref", voice.ref), ("prompt", voice.prompt)) if arr is not None}
    return voicefile.save(path, tensors, {"format": VOICE_FORMAT, "prompt_text": voice.prompt_text})


def read_voice(path: Path, args) -> VoicePrompt:
    from ttscli import voicefile

    tensors, meta = voicefile.load(path, VOICE_FORMAT, "VoxCPM2")
    shape = (args.patch_size, args.feat_dim)
    for name, arr in tensors.items():
        if name not in ("ref", "prompt") or arr.ndim != 3 or tuple(arr.shape[1:]) != shape or not len(arr):
            raise UsageError(f"{path}: {name} {list(arr.shape)} is not a VoxCPM2 patch sequence [T, {shape[0]}, "
                             f"{shape[1]}] for this model")
    if not tensors:
        raise UsageError(f"{path} holds no reference")
    prompt = tensors.get("prompt")
    return VoicePrompt(ref=tensors.get("ref"), prompt=None if prompt is None else prompt.astype(np.float32),
                       prompt_text=meta.get("prompt_text", "") if prompt is not None else "")
