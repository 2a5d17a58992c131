"""Kokoro pipeline: text chunk -> phonemes -> pieces of <= 510 tokens -> audio, one piece at a time
(with --stream, a short first piece: see STREAM_PHONEMES)."""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import mlx.core as mx
import numpy as np

from ttscli.errors import UsageError
from ttscli.models.base import Pipeline, Request
from ttscli.words import frame_spans, input_words, timed_segments

from .g2p import language_of, phonemize
from .load import parse_voice, style_row
from .model import KModel

if TYPE_CHECKING:
    from .onnx_runtime import OnnxKModel

MAX_PHONEMES = 510
# --stream: a chunk's first piece is at most this many symbols (cut at a sentence or clause mark),
# so its audio leaves after one sentence's work instead of the whole chunk's (up to 400 characters
# of sentences packed together); the pieces after it keep the full length
STREAM_PHONEMES = 100
_JA_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uff66-\uff9f]")


def split_phonemes(ps: str, limit: int = MAX_PHONEMES) -> list[str]:
    """Pieces of at most ``limit`` symbols, cut after the last sentence mark that fits, else a
    clause mark, else a comma or dash, else a space (upstream truncates instead)."""
    out = []
    ps = ps.strip()
    while len(ps) > limit:
        head = ps[:limit + 1]
        cut = -1
        for marks in ("!.?…", ":;", ",—", " "):
            cut = max(head.rfind(m, 0, limit) for m in marks)
            if cut > 0:
                break
        cut = cut + 1 if cut > 0 else limit
        out.append(ps[:cut].strip())
        ps = ps[cut:].strip()
    if ps:
        out.append(ps)
    return out


def pieces_of(ps: str, stream: bool) -> list[str]:
    """The pieces a chunk's phonemes are spoken in: at most MAX_PHONEMES symbols each, the first
    at most STREAM_PHONEMES when streaming."""
    ps = ps.strip()
    if not stream or len(ps) <= STREAM_PHONEMES:
        return split_phonemes(ps)
    first = split_phonemes(ps, STREAM_PHONEMES)[0]
    return [first, *split_phonemes(ps[len(first):])]


def tokens_of(ps: str, vocab: dict[str, int]) -> list[int]:
    """Phoneme ids between the 0 pads; symbols the vocabulary lacks are dropped, as upstream."""
    return [0] + [vocab[c] for c in ps if c in vocab] + [0]


LEAD_FRAMES = 3


def token_spans(piece: str, vocab: dict[str, int], durations: np.ndarray,
                seconds_per_frame: float) -> list[tuple[float, float] | None]:
    """(start, end) in seconds of each symbol of ``piece`` from its token's frames (the pads at
    both ends included in ``durations``); None for a symbol the vocabulary lacks.

    Every span is moved :data:`LEAD_FRAMES` earlier (at most by the leading pad's frames), as
    upstream's timestamps are (hexgrad's ``KPipeline.join_timestamps``): the decoder sounds a
    token about that much before its frames begin, so a word's onset is heard where it is
    reported."""
    lead = min(LEAD_FRAMES, int(durations[0])) if len(durations) else 0
    spans = [(max(0.0, a - lead * seconds_per_frame), max(0.0, b - lead * seconds_per_frame))
             for a, b in frame_spans(durations, seconds_per_frame)]
    out: list[tuple[float, float] | None] = []
    k = 1
    for c in piece:
        if c in vocab:
            out.append(spans[k])
            k += 1
        else:
            out.append(None)
    return out


def pick_voice(voices: dict, default: str, by_language: dict[str, str], lang: str) -> str:
    """The voice for ``lang`` when a request names none: the language's own where ``voices`` holds
    it, else ``default`` where it holds that, else the first voice by name."""
    own = by_language.get(lang)
    if own in voices:
        return own
    return default if default in voices else min(voices)


class KokoroPipeline(Pipeline):
    max_chunk_chars = 400
    independent_generations = True    # a generation's phonemes and random key are its own
    word_durations = True

    def __init__(self, model: KModel | OnnxKModel, voices: dict[str, np.ndarray], vocab: dict[str, int],
                 default_voice: str = "jf_alpha", language_voices: dict[str, str] | None = None):
        super().__init__()
        self.backends = {"acoustic": "mlx"}
        self.model = model
        self.voices = voices
        self.vocab = vocab
        self.default_voice = default_voice
        # the voice a request without --voice gets in a language, where one is clearer there than the
        # default (the installable voices are Japanese; two of them are far clearer in English)
        self.language_voices = dict(language_voices or {})
        self.sample_rate = model.sample_rate

    def language(self, request: Request) -> str:
        if request.language is not None and request.language.lower() != "auto":
            return language_of(request.language)
        return "ja" if _JA_SCRIPT.search(request.text) else "en"

    def voice_for(self, lang: str) -> str:
        """The voice a request in ``lang`` without a voice of its own is spoken with."""
        return pick_voice(self.voices, self.default_voice, self.language_voices, lang)

    def synthesize(self, tokens: list[int], style: np.ndarray, speed: float = 1.0,
                   key: mx.array | None = None) -> tuple[np.ndarray, dict]:
        """Audio for one token list (with pads), and its stage timings."""
        t0 = time.perf_counter()
        toks, s = mx.array(tokens, dtype=mx.int32), mx.array(style)
        d, dur = self.model.durations(toks, s, speed)
        mx.eval(dur)
        p = self.model.prosody(toks, s, d, dur)
        mx.eval(p.f0, p.n, p.asr)
        t1 = time.perf_counter()
        _, feats = self.model.source(p.f0, key)
        audio = self.model.decode(p, s, feats)
        mx.eval(audio)
        t2 = time.perf_counter()
        frames = np.asarray(dur).astype(np.int64)
        return np.array(audio, dtype=np.float32), {"prosody_s": t1 - t0, "decoder_s": t2 - t1,
                                                   "frames": int(frames.sum()), "durations": frames}

    def generate(self, request: Request) -> Iterator[np.ndarray]:
        for audio, _ in self.pieces(request, timed=False):
            yield audio

    def generate_words(self, request: Request) -> Iterator[tuple[np.ndarray, list]]:
        yield from self.pieces(request, timed=True)

    def pieces(self, request: Request, timed: bool) -> Iterator[tuple[np.ndarray, list]]:
        """(audio, words) per piece; the words (from the predicted durations) only when ``timed``:
        each input word phonemized alone is found in the chunk's phonemes, and each symbol lasts
        its token's frames."""
        speed = float(request.speed if request.speed is not None else 1.0)
        if not 0.25 <= speed <= 4.0:
            raise UsageError(f"--speed must be in [0.25..4] for Kokoro, got {speed:g}")
        lang = self.language(request)
        pack, _ = parse_voice(request.voice or self.voice_for(lang), self.voices)
        noise = bool(request.knobs.get("source_noise", False))
        if noise and self.backends.get("acoustic") == "onnx":
            from .onnx_runtime import NOISE_ERROR

            raise UsageError(NOISE_ERROR)
        key = None
        if noise:
            seed = request.seed if request.seed is not None else int(np.random.SeedSequence().entropy % (2 ** 32))
            key = mx.random.key(seed)
        stats = self.reset_stats()
        t0 = time.perf_counter()
        ps = phonemize(request.text, lang).strip()
        stats.extra["phonemize_s"] = time.perf_counter() - t0
        pieces = [p for p in pieces_of(ps, request.stream) if len(tokens_of(p, self.vocab)) > 2]
        stats.extra.update(pieces=len(pieces), audio_s=0.0, prosody_s=0.0)
        place = self.word_places(request.text, lang, ps, pieces) if timed else None
        for k, piece in enumerate(pieces):
            tokens = tokens_of(piece, self.vocab)
            if key is not None:
                key, sub = mx.random.split(key)
            else:
                sub = None
            audio, t = self.synthesize(tokens, style_row(pack, len(piece)), speed, sub)
            stats.prefill_tokens += len(tokens)
            stats.prefill_s += t["prosody_s"]
            stats.extra["prosody_s"] += t["prosody_s"]
            stats.decoder_s += t["decoder_s"]
            stats.frames += t["frames"]
            stats.decoder_frames += t["frames"]
            stats.extra["audio_s"] += audio.size / self.sample_rate
            if stats.first_audio_s is None:
                stats.first_audio_s = time.perf_counter() - t0
            words = []
            if place is not None:
                seconds = audio.size / self.sample_rate
                spf = seconds / t["frames"] if t["frames"] else 0.0
                words = place(k, token_spans(piece, self.vocab, t["durations"], spf), seconds)
            yield audio, words

    @staticmethod
    def word_places(text: str, lang: str, ps: str, pieces: list[str]):
        """:func:`ttscli.words.timed_segments` over the chunk's phonemes ``ps``, whose pieces are
        consecutive substrings of it."""
        words = input_words(text)
        alone = [phonemize(w, lang) for w in words]
        bounds, at = [], 0
        for piece in pieces:
            a = ps.find(piece, at)
            bounds.append((a, a + len(piece)))
            at = a + len(piece)
        return timed_segments(words, alone, ps, bounds)
