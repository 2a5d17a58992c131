"""Piper pipeline: text -> sentences of phoneme ids -> VITS -> one float32 chunk per sentence."""
from __future__ import annotations

import os
import time
from typing import Iterator

import mlx.core as mx
import numpy as np

from ttscli.models.base import Pipeline, Request

from .model import Vits
from .phonemize import phoneme_ids, phonemize
from .settings import scales, sentence_audio
from .timing import SentenceWords


class PiperPipeline(Pipeline):
    max_chunk_chars = 400
    independent_generations = True    # a generation's random key and sentences are its own
    word_durations = True

    def __init__(self, model: Vits, id_map: dict, espeak_voice: str = "en-us"):
        super().__init__()
        self.backends = {"vits": "mlx"}
        self.model = model
        self.id_map = id_map
        self.espeak_voice = espeak_voice
        self.sample_rate = model.args.sample_rate

    def settings(self, request: Request) -> dict:
        """Inference scales: the voice's defaults, then the request's knobs, then speed."""
        a = self.model.args
        return scales({"noise_scale": a.noise_scale, "noise_w": a.noise_w, "length_scale": a.length_scale}, request)

    def generate(self, request: Request) -> Iterator[np.ndarray]:
        """Yield audio per sentence (piper synthesises sentence by sentence), as piper-tts does:
        peak-normalised per sentence unless the ``normalize`` knob is False."""
        for audio, _ in self.sentences(request, timed=False):
            yield audio

    def generate_words(self, request: Request) -> Iterator[tuple[np.ndarray, list]]:
        yield from self.sentences(request, timed=True)

    def sentences(self, request: Request, timed: bool) -> Iterator[tuple[np.ndarray, list]]:
        """(audio, words) per sentence; the words (from the predicted durations) only when ``timed``."""
        cfg = self.settings(request)
        seed = request.seed if request.seed is not None else int.from_bytes(os.urandom(4), "little")
        key = mx.random.key(seed)
        normalize = request.knobs.get("normalize", True)
        volume = float(request.knobs.get("volume", 1.0))
        stats = self.reset_stats()
        t0 = time.perf_counter()
        phonemes = [s for s in phonemize(request.text, self.espeak_voice) if s]
        sentences = [phoneme_ids(s, self.id_map) for s in phonemes]
        stats.extra["phonemize_s"] = time.perf_counter() - t0
        stats.extra["sentences"] = len(sentences)
        words = SentenceWords(request.text, phonemes, self.id_map, self.espeak_voice) if timed else None
        for k, ids in enumerate(sentences):
            key, k_dur, k_prior = mx.random.split(key, 3)
            t1 = time.perf_counter()
            m_p, logs_p, frames = self.model.durations(mx.array([ids]), cfg["noise_w"], cfg["length_scale"], k_dur)
            t2 = time.perf_counter()
            z = self.model.latents(m_p, logs_p, frames, cfg["noise_scale"], k_prior)
            audio = self.model.decode(z)[0]
            mx.eval(audio)
            t3 = time.perf_counter()
            audio = sentence_audio(np.array(audio, dtype=np.float32), normalize, volume)
            stats.prefill_tokens += len(ids)
            stats.prefill_s += t2 - t1
            stats.decoder_s += t3 - t2
            stats.frames += int(z.shape[1])
            stats.decoder_frames += int(z.shape[1])
            if stats.first_audio_s is None:
                stats.first_audio_s = time.perf_counter() - t0
            yield audio, (words.place(k, np.maximum(frames, 0), len(audio) / self.sample_rate) if words else [])
