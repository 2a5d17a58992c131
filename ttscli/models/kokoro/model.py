"""Kokoro-82M (StyleTTS2 family, iSTFTNet decoder) on MLX: tokens + style -> 24 kHz audio.

``style`` is one row ``[256]`` of a voice pack: ``[:128]`` conditions the decoder, ``[128:]`` the
prosody predictor. The forward pass is split where parity compares with the reference:
``durations`` -> ``prosody`` (F0, N, aligned text features) -> ``source`` -> ``decode``.
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx import nn

from .albert import CustomAlbert
from .config import ModelArgs
from .istftnet import Decoder
from .modules import Linear, ProsodyPredictor, TextEncoder


@dataclass
class Prosody:
    durations: mx.array        # [T] frames per token (float, integral values)
    f0: mx.array               # [2F] Hz
    n: mx.array                # [2F]
    asr: mx.array              # [F, 512] text features aligned to frames


class KModel(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        a = args
        self.bert = CustomAlbert(a.plbert)
        self.bert_encoder = Linear(a.plbert.hidden_size, a.hidden_dim)
        self.predictor = ProsodyPredictor(a.style_dim, a.hidden_dim, a.n_layer, a.max_dur)
        self.text_encoder = TextEncoder(a.hidden_dim, a.text_encoder_kernel_size, a.n_layer, a.n_token)
        self.decoder = Decoder(a.hidden_dim, a.style_dim, a.istftnet, a.sample_rate)

    @property
    def sample_rate(self) -> int:
        return self.args.sample_rate

    def durations(self, tokens: mx.array, style: mx.array, speed: float = 1.0) -> tuple[mx.array, mx.array]:
        """(predictor features ``d [T, 640]``, frames per token ``[T]``)."""
        d_en = self.bert_encoder(self.bert(tokens))
        return self.predictor.durations(d_en, style[self.args.style_dim:], speed)

    def prosody(self, tokens: mx.array, style: mx.array, d: mx.array, durations: mx.array) -> Prosody:
        """F0, N and the aligned text features for given durations (the predicted ones, or a
        reference's when teacher-forcing)."""
        import numpy as np

        reps = np.asarray(durations).astype(np.int64)
        idx = mx.array(np.repeat(np.arange(reps.size), reps).astype(np.int32))
        en = mx.take(d, idx, axis=0)
        f0, n = self.predictor.f0_n(en, style[self.args.style_dim:])
        asr = mx.take(self.text_encoder(tokens), idx, axis=0)
        return Prosody(durations, f0, n, asr)

    def source(self, f0: mx.array, key: mx.array | None = None) -> tuple[mx.array, mx.array]:
        return self.decoder.generator.source(f0, key)

    def decode(self, p: Prosody, style: mx.array, har_features: mx.array, taps: dict | None = None) -> mx.array:
        return self.decoder(p.asr, p.f0, p.n, style[: self.args.style_dim], har_features, taps)

    def __call__(self, tokens: mx.array, style: mx.array, speed: float = 1.0, key: mx.array | None = None,
                 taps: dict | None = None) -> mx.array:
        """``tokens [T]`` (with the 0 pads at both ends), ``style [256]`` -> audio ``[600 F]``."""
        d, dur = self.durations(tokens, style, speed)
        mx.eval(dur)
        p = self.prosody(tokens, style, d, dur)
        har, feats = self.source(p.f0, key)
        if taps is not None:
            taps.update(durations=dur, f0=p.f0, n=p.n, har=har, har_features=feats)
        return self.decode(p, style, feats, taps)
