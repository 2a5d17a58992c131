"""An IndexTTS2 voice: what the pipeline keeps of a reference recording, and the encoder that
makes it (upstream ``infer_generator``'s reference branch, computed once per speaker).

From the reference (resampled to 22.05 kHz as upstream's ``librosa.load`` reads it, then to 16 kHz
by torchaudio's resampler): w2v-BERT 2.0's 17th hidden state normalised by
``wav2vec2bert_stats.pt`` (the semantic features, 50 a second); from those the speaker
conditioning latents (Conformer + perceiver, 32 x the GPT's width), the speaker's own emotion
vector, and the semantic codec's quantised features through S2Mel's length regulator at the
reference mel's frame count (the flow's prompt condition); the 22.05 kHz mel itself (the flow's
prompt); CAMPPlus's style vector of the 16 kHz Kaldi fbank.

A saved voice holds the five arrays that depend on the speaker only, so a saved voice speaks
without any of the reference encoders.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.errors import AudioInputError, UsageError

FORMAT = "ttscli-indextts2-voice-1"
REF_RATE = 22050
MAX_REF_SECONDS = 15.0          # upstream cuts longer references; ttscli refuses them
FEATURE_LAYER = 17              # hidden_states[17] of w2v-BERT 2.0


@dataclass
class Voice:
    cond_latents: np.ndarray     # [32, D]
    emovec: np.ndarray           # [D]   the speaker's own emotion vector
    style: np.ndarray            # [192] CAMPPlus
    prompt_cond: np.ndarray      # [P, C] regulated reference content
    ref_mel: np.ndarray          # [P, 80]

    def save(self, path: Path) -> Path:
        from ttscli import voicefile

        return voicefile.save(path, {k: np.asarray(getattr(self, k), np.float32) for k in self.__dataclass_fields__},
                              {"format": FORMAT})

    @classmethod
    def load(cls, path: Path, width: int, content: int) -> "Voice":
        from ttscli import voicefile

        t, _ = voicefile.load(path, FORMAT, "IndexTTS2")
        want = {"cond_latents": (None, width), "emovec": (width,), "style": (None,), "prompt_cond": (None, content),
                "ref_mel": (None, 80)}
        for k, shape in want.items():
            a = t.get(k)
            if a is None or a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
                raise UsageError(f"{path}: not a voice of this IndexTTS2 model ({k} is "
                                 f"{'missing' if a is None else list(a.shape)})")
        if t["prompt_cond"].shape[0] != t["ref_mel"].shape[0]:
            raise UsageError(f"{path}: prompt_cond and ref_mel disagree in length")
        return cls(**{k: t[k].astype(np.float32) for k in want})


class ReferenceEncoder:
    """The reference encoders: w2v-BERT 2.0 (with its feature extractor and the normalising stats),
    the semantic codec, the length regulator, CAMPPlus and the GPT's conditioners."""

    def __init__(self, w2v, stats: tuple[np.ndarray, np.ndarray], codec, s2mel, campplus, conditioners,
                 feature_args=None, layer: int = FEATURE_LAYER):
        self.w2v, self.stats, self.codec, self.s2mel = w2v, stats, codec, s2mel
        self.campplus, self.conditioners, self.feature_args, self.layer = campplus, conditioners, feature_args, layer

    def features(self, wav16: np.ndarray) -> mx.array:
        """Normalised semantic features ``[1, T, F]`` of a 16 kHz signal (upstream ``get_emb``)."""
        from ttscli.codecs.w2vbert.model import semantic_features

        mean, std = self.stats
        return semantic_features(self.w2v, wav16, self.layer, mean, std, self.feature_args)[None]

    def voice(self, wav: np.ndarray, sr: int) -> Voice:
        from ttscli.audio import resample as soxr_resample
        from ttscli.codecs.s3gen.frontend import matcha_mel, resample
        from ttscli.codecs.s3gen.xvector import kaldi_fbank

        wav22 = soxr_resample(np.asarray(wav, np.float32), sr, REF_RATE)
        if len(wav22) > MAX_REF_SECONDS * REF_RATE + 1:
            raise AudioInputError(f"the reference is {len(wav22) / REF_RATE:.1f} s; IndexTTS2 takes at most "
                                  f"{MAX_REF_SECONDS:g} s: trim it")
        wav16 = resample(wav22, REF_RATE, 16000)
        feat = self.features(wav16)
        _, quantized = self.codec.quantize(feat)
        ref_mel = matcha_mel(wav22, REF_RATE, 1024, 256, 80)
        prompt_cond = self.s2mel.length_regulator(quantized, ref_mel.shape[0])
        fb = kaldi_fbank(wav16)
        style = self.campplus(mx.array(fb - fb.mean(axis=0, keepdims=True)))
        cond = self.conditioners.conditioning(feat)
        emovec = self.conditioners.emovec(feat)
        mx.eval(prompt_cond, style, cond, emovec)
        return Voice(np.array(cond[0]), np.array(emovec[0]), np.array(style).reshape(-1),
                     np.array(prompt_cond[0]), ref_mel)

    def emotion(self, wav: np.ndarray, sr: int) -> np.ndarray:
        """The emotion vector of an emotion reference (16 kHz as upstream reads it; at most 15 s)."""
        from ttscli.audio import resample as soxr_resample

        wav16 = soxr_resample(np.asarray(wav, np.float32), sr, 16000)
        if len(wav16) > MAX_REF_SECONDS * 16000 + 1:
            raise AudioInputError(f"the emotion reference is {len(wav16) / 16000:.1f} s; IndexTTS2 takes at most "
                                  f"{MAX_REF_SECONDS:g} s: trim it")
        e = self.conditioners.emovec(self.features(wav16))
        return np.array(e[0])


def random_voice(width: int, content: int, seconds: float = 4.0, seed: int = 0) -> Voice:
    """A voice of random arrays at the real sizes (random weights: timing, not speech)."""
    rng = np.random.default_rng(seed)
    frames = int(seconds * REF_RATE / 256)
    return Voice(rng.standard_normal((32, width)).astype(np.float32), rng.standard_normal(width).astype(np.float32),
                 rng.standard_normal(192).astype(np.float32),
                 rng.standard_normal((frames, content)).astype(np.float32),
                 (rng.standard_normal((frames, 80)) - 5.0).astype(np.float32))
