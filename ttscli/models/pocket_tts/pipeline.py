"""Pocket TTS pipeline: request -> voice prompt + text prompt -> latent frames -> 24 kHz audio.

Upstream: pocket_tts/models/tts_model.py (``get_state_for_audio_prompt``, ``_generate``,
``_autoregressive_generation``, ``_decode_audio_worker``). The flow LM's cache starts from the
voice (a built-in voice's stored cache, or a clone reference encoded by Mimi and prefilled), then
the text is prefilled and frames follow one at a time: each frame's input is the previous latent
(the first, the begin-of-audio vector); its output conditions the flow head, which turns noise of
variance ``temperature`` into the next latent, and the EOS head, which ends the utterance
``frames_after_eos`` frames after its logit first exceeds ``eos_threshold`` (not before frame 6).
Each latent is decoded as it comes by one causal Mimi stream, so streamed chunks equal the one-shot
audio; the first 5 ms of each chunk of text fade in (a fresh decoder's first samples click).
"""
from __future__ import annotations

import hashlib
import math
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any, Iterator

import mlx.core as mx
import numpy as np

from ttscli._blas import one_thread
from ttscli.errors import AudioInputError, GenerationError, UsageError
from ttscli.lm.cache import KVCache
from ttscli.lm.sample import KeyStream
from ttscli.models.base import Pipeline, Request

from .flow_lm import lsd_decode
from .prompt import end_on_pause, prepare_text

SAMPLE_RATE = 24000
DEFAULT_VOICE = "alba"
# upstream's frame budget: the text's tokens at 3 per second, plus 2 s
TOKENS_PER_SECOND = 3.0
PADDING_S = 2.0
MIN_FRAMES_BEFORE_EOS = 6
FADE_IN_S = 0.005
# frames per Mimi decoder call after the first chunk (see PocketPipeline.generate)
DECODE_FRAMES = 4


def decode_sizes(r: Request) -> tuple[int, int]:
    """Frames in the Mimi decoder's first call and in each call after it (see
    :meth:`PocketPipeline.generate`): the rows decode in the same groups, so their Mimi streams
    carry the same state as a generation alone."""
    return r.first_chunk_frames or 1, min(DECODE_FRAMES, r.chunk_frames)


def frame_limit(r: Request, tokens: int) -> int:
    """The request's frame budget: ``max_frames``, else upstream's (the tokens at 3 per second, plus 2 s)."""
    return r.max_frames or math.ceil((tokens / TOKENS_PER_SECOND + PADDING_S) * 12.5)


def limit_message(limit: int) -> str:
    return (f"Pocket TTS reached {limit} frames without ending the utterance "
            "(raise --max-frames if the text is that long)")


def save_voice_state(path: Path, state: list[tuple[mx.array, mx.array]]) -> Path:
    """A clone's voice state in upstream's voice file layout (``export_model_state``: per layer
    ``transformer.layers.{i}.self_attn/cache [2, 1, T, heads, head_dim]`` and ``/offset``), so
    ttscli's ``--voice FILE`` and upstream's voice argument both read it."""
    from ttscli import voicefile

    tensors = {}
    for i, (k, v) in enumerate(state):
        name = f"transformer.layers.{i}.self_attn"
        tensors[f"{name}/cache"] = np.stack([np.array(k), np.array(v)]).transpose(0, 1, 3, 2, 4)
        tensors[f"{name}/offset"] = np.array([k.shape[2]], np.int64)
    return voicefile.save(path, tensors, {"format": "pocket-tts-voice-state"})


class DecodeThread:
    """One long-lived daemon thread that runs submitted calls in order and answers each with a
    :class:`concurrent.futures.Future`.

    Long-lived, because MLX keeps a stream (and its worker thread) for every thread that has
    evaluated on it: a thread per generation would leave one behind per request in a server. A
    daemon that is never joined, because a thread that has used MLX and ends while the
    interpreter shuts down can abort the process ("terminate called without an active
    exception"), which a ``ThreadPoolExecutor`` (joined at exit) does now and then."""

    def __init__(self, name: str = "pocket-mimi"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, fn, *args) -> Future:
        future: Future = Future()
        self._jobs.put((future, fn, args))
        return future

    def _run(self) -> None:
        while True:
            future, fn, args = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001  (handed to the generation that waits on it)
                future.set_exception(e)


class PocketPipeline(Pipeline):
    sample_rate = SAMPLE_RATE
    ref_sample_rate = SAMPLE_RATE
    # upstream regroups sentences into chunks of at most 50 tokens (~200 characters of English)
    max_chunk_chars = 200
    independent_generations = True    # the LM cache, key stream and decoder stream are per generation

    def __init__(self, spec: Any, model, tokenizer, code_decoder, voices: dict[str, Path], folder: Path | None):
        super().__init__()
        self.spec = spec
        self.model = model
        self.tokenizer = tokenizer
        self.code_decoder = code_decoder
        self.voices = voices
        self.folder = folder
        self.backends = {"flow_lm": "mlx", "speech_decoder": "mlx"}
        self._voice_states: dict[str, list[tuple[mx.array, mx.array]]] = {}
        self._clone: tuple[str, list[tuple[mx.array, mx.array]]] | None = None
        self._decoder_thread: DecodeThread | None = None
        self._decoder_lock = threading.Lock()

    @property
    def args(self):
        return self.model.args

    # ---------------------------------------------------------------- voices
    def _cache_from(self, state: list[tuple[mx.array, mx.array]]) -> list[KVCache]:
        if hasattr(self.code_decoder, "cache_from"):     # the flow LM on onnxruntime: its own buffers
            return self.code_decoder.cache_from(state)
        cache = self.code_decoder.new_cache()
        for c, (k, v) in zip(cache, state):
            c.keys, c.values, c.offset = k, v, k.shape[2]   # storage exactly full: a write copies it
        return cache

    def voice_cache(self, r: Request) -> list[KVCache]:
        """The flow LM's cache after the request's voice prompt."""
        from .load import read_voice_state

        if r.ref_audio is not None:
            if r.voice:
                raise UsageError("give either a voice (--voice) or reference audio (--ref), not both")
            state = self.clone_state(r)
            if r.save_voice:
                save_voice_state(Path(r.save_voice), state)
            return self._cache_from(state)
        if r.save_voice:
            raise UsageError("--save-voice needs reference audio (--ref) to encode")
        if r.voice and r.voice.endswith(".safetensors"):
            path = Path(r.voice)
            if not path.is_file():
                raise UsageError(f"voice file {path} does not exist")
            return self._cache_from(read_voice_state(path, self.model))
        name = r.voice or (DEFAULT_VOICE if DEFAULT_VOICE in self.voices else next(iter(self.voices), None))
        if name is None:
            return self.code_decoder.new_cache()     # random weights ship no voices: no voice prompt
        if name not in self.voices:
            raise UsageError(f"Pocket TTS has no voice {name!r} (voices: {', '.join(self.voices) or 'none'})")
        if name not in self._voice_states:
            self._voice_states[name] = read_voice_state(self.voices[name], self.model)
        return self._cache_from(self._voice_states[name])

    def clone_state(self, r: Request) -> list[tuple[mx.array, mx.array]]:
        wav = np.asarray(r.ref_audio, np.float32).reshape(-1)
        if r.ref_sample_rate and r.ref_sample_rate != SAMPLE_RATE:
            import soxr

            wav = soxr.resample(wav, r.ref_sample_rate, SAMPLE_RATE).astype(np.float32)
        if wav.size < self.args.mimi.frame_samples:
            raise AudioInputError("the reference audio is shorter than one Mimi frame (80 ms)")
        key = hashlib.blake2b(wav.tobytes(), digest_size=16).hexdigest()
        if self._clone is None or self._clone[0] != key:
            cache = self.code_decoder.new_cache()
            self.code_decoder.prefill(self.voice_prompt(wav), cache)
            if hasattr(self.code_decoder, "state_of"):
                state = self.code_decoder.state_of(cache)
            else:
                state = [(c.keys[:, :, :c.offset], c.values[:, :, :c.offset]) for c in cache]
                mx.eval(state)
            self._clone = (key, state)
        return self._clone[1]

    def voice_prompt(self, wav: np.ndarray) -> mx.array:
        """A 24 kHz reference -> the LM's voice prompt ``[1, T, d_model]``."""
        latents = self.model.mimi.encode(end_on_pause(wav, SAMPLE_RATE))
        return self.model.flow_lm.voice_embeddings(latents)

    # ---------------------------------------------------------------- generation
    def settings(self, r: Request, words_guess: int) -> dict[str, Any]:
        k, a = r.knobs, self.args
        after = k.get("frames_after_eos", a.frames_after_eos)
        return {"temperature": float(k.get("temperature", a.temperature)),
                "steps": int(k.get("sampler_decode_steps", 1)),
                "noise_clamp": k.get("noise_clamp"),
                "eos_threshold": float(k.get("eos_threshold", a.eos_threshold)),
                "frames_after_eos": words_guess + 2 if after is None else int(after)}

    def noise(self, keys: KeyStream, temperature: float, clamp: float | None) -> mx.array:
        shape = (1, self.args.latent_dim)
        if temperature == 0:
            return mx.zeros(shape)
        std = math.sqrt(temperature)
        if clamp is None:
            return mx.random.normal(shape, key=keys.next()) * std
        return mx.random.truncated_normal(-clamp / std, clamp / std, shape, key=keys.next()) * std

    def latent(self, hidden: mx.array, noise: mx.array, steps: int) -> mx.array:
        """One frame's latent from the LM's hidden and the noise (the flow head's sampling)."""
        return lsd_decode(self.model.flow_lm.flow_net, hidden, noise, steps)

    def frame(self, embed: mx.array, cache: Any, noise: mx.array, steps: int) -> tuple[mx.array, mx.array, mx.array]:
        """One frame: (EOS logit ``[1, 1]``, hidden ``[1, H]``, next latent ``[1, latent]``): the
        flow LM's step, then the flow head from the noise; one run of the graph where the flow
        LM is on onnxruntime and asks for the graph's step count (its ``frame``)."""
        if hasattr(self.code_decoder, "frame") and steps == self.code_decoder.flow_steps:
            return self.code_decoder.frame(embed, cache, noise)
        eos_logit, hidden = self.code_decoder.step(embed, cache)
        return eos_logit, hidden, self.latent(hidden, noise, steps)

    def text_tokens(self, r: Request) -> tuple[list[int], int]:
        """(the prepared text's tokens, upstream's frames-after-EOS guess); no tokens is a UsageError."""
        text, guess = prepare_text(r.text, self.args)
        tokens = self.tokenizer.encode(text)
        if not tokens:
            raise UsageError("the text has no tokens")
        return tokens, guess

    def rows(self):
        """Requests as rows of one flow-LM batch (ttscli.models.pocket_tts.rows): the MLX flow LM
        only (another backend takes one row per call)."""
        from ttscli.lm.decoder import MLXCodeDecoder

        if self.backends.get("flow_lm") != "mlx" or not isinstance(self.code_decoder, MLXCodeDecoder):
            return None
        from .rows import PocketRows

        return PocketRows(self)

    def frames(self, r: Request) -> Iterator[mx.array]:
        """Latent frames ``[1, 1, latent]`` (normalised, as the LM reads them) until EOS."""
        tokens, guess = self.text_tokens(r)
        s = self.settings(r, guess)
        lm, dec = self.model.flow_lm, self.code_decoder
        t0 = time.perf_counter()
        cache = self.voice_cache(r)
        dec.prefill(lm.text_embeddings(mx.array([tokens])), cache)
        if isinstance(cache, list):     # MLX's lazy cache (onnxruntime's buffers are filled already)
            mx.eval([c.state for c in cache])
        self.stats.prefill_tokens = len(tokens)
        self.stats.prefill_s = time.perf_counter() - t0
        limit = frame_limit(r, len(tokens))
        keys = KeyStream(r.seed)
        with one_thread():      # the LM here and Mimi's thread: one core each (see generate)
            yield from self._frame_loop(r, s, cache, keys, limit)

    def _frame_loop(self, r: Request, s: dict[str, Any], cache: list[KVCache], keys: KeyStream,
                    limit: int) -> Iterator[mx.array]:
        lm = self.model.flow_lm
        latent, eos_at = None, None
        for step in range(limit):
            t = time.perf_counter()
            noise = self.noise(keys, s["temperature"], s["noise_clamp"])
            eos_logit, _, latent = self.frame(lm.latent_embeddings(latent), cache, noise, s["steps"])
            latent = latent[:, None]
            eos = float(eos_logit[0, 0]) > s["eos_threshold"]
            mx.eval(latent)
            self.stats.frame_s.append(time.perf_counter() - t)
            if eos and eos_at is None and step >= MIN_FRAMES_BEFORE_EOS and not r.ignore_eos:
                eos_at = step
            if eos_at is not None and step >= eos_at + s["frames_after_eos"]:
                return
            self.stats.frames += 1
            yield latent
        if not r.ignore_eos:
            raise GenerationError(limit_message(limit))

    def decoder_thread(self) -> "DecodeThread":
        """The pipeline's one Mimi decoding thread, shared by every generation (see
        :class:`DecodeThread`)."""
        with self._decoder_lock:
            if self._decoder_thread is None:
                self._decoder_thread = DecodeThread()
            return self._decoder_thread

    def decode_chunk(self, latents: list[mx.array], stream: Any, first: bool) -> np.ndarray:
        """Normalised latent frames -> their samples, continuing the Mimi ``stream``; the first
        chunk of a stream fades in (a fresh decoder's first samples click)."""
        t = time.perf_counter()
        lm = self.model.flow_lm
        x = mx.concatenate(latents, axis=1) * lm.emb_std + lm.emb_mean
        audio = np.array(self.model.mimi.decode(x, stream)[0], dtype=np.float32)
        if first:
            n = min(int(FADE_IN_S * SAMPLE_RATE), len(audio))
            audio[:n] *= np.linspace(0, 1, int(FADE_IN_S * SAMPLE_RATE), dtype=np.float32)[:n]
        self.stats.decoder_s += time.perf_counter() - t
        self.stats.decoder_frames += len(latents)
        return audio

    def generate(self, r: Request) -> Iterator[np.ndarray]:
        """Frames from :meth:`frames`, decoded by Mimi on a thread of its own while the flow LM
        runs the next frames (upstream's ``_decode_audio_worker`` design): MLX releases the GIL
        while it evaluates and each thread has its own stream, so on two cores the decoder's time
        hides behind the LM's; while frames come the BLAS runs on one thread
        (:func:`ttscli._blas.one_thread`, as upstream pins torch to one), so each has a core
        rather than both contending for two with two threads each. The decoder is handed the first chunk's frames, then
        ``DECODE_FRAMES`` at a time, whatever the chunk size asked for: a small handful keeps it
        busy beside the LM and leaves little to decode after the last frame, while reading
        Mimi's weights for several frames at once costs much less per frame than for one.
        Calls run in order on one thread, so the stream state and the samples are those of a
        serial decode; samples are regrouped into the request's chunks. The first chunk is
        waited for at once (first audio as early as one frame allows)."""
        t_start = time.perf_counter()
        stream = self.model.mimi.new_stream()
        first, then = decode_sizes(r)
        frame = self.args.mimi.frame_samples
        pending: list[mx.array] = []
        decoding: deque[Future] = deque()
        ready: list[np.ndarray] = []          # decoded samples not yet handed on
        state = {"decodes": 0, "chunks": 0}

        def submit() -> None:
            decoding.append(pool.submit(self.decode_chunk, list(pending), stream, state["decodes"] == 0))
            state["decodes"] += 1
            pending.clear()

        def chunks(wait: bool, last: bool = False) -> Iterator[np.ndarray]:
            while decoding and (wait or decoding[0].done()):
                ready.append(decoding.popleft().result())
            if not r.stream:
                return
            while ready:
                want = (first if state["chunks"] == 0 else r.chunk_frames) * frame
                have = sum(len(a) for a in ready)
                if have < want and not last:
                    return
                audio = np.concatenate(ready)
                ready[:] = [audio[want:]] if have > want else []
                if self.stats.first_audio_s is None:
                    self.stats.first_audio_s = time.perf_counter() - t_start
                state["chunks"] += 1
                yield audio[:want]

        pool = self.decoder_thread()
        try:
            for latent in self.frames(r):
                pending.append(latent)
                if len(pending) >= (first if state["decodes"] == 0 else then):
                    submit()
                yield from chunks(wait=r.stream and state["chunks"] == 0 and state["decodes"] > 0)
            if pending:
                submit()
            yield from chunks(wait=True, last=True)
        finally:
            # a closed or failed generation leaves no work queued and none running
            for f in decoding:
                f.cancel()
            wait(decoding)
        if not r.stream and ready:
            if self.stats.first_audio_s is None:
                self.stats.first_audio_s = time.perf_counter() - t_start
            yield np.concatenate(ready)
