"""The SeamlessM4T front end of w2v-BERT 2.0: 16 kHz audio -> stacked, normalised Kaldi fbanks.

transformers' ``SeamlessM4TFeatureExtractor`` (as ``facebook/w2v-bert-2.0`` configures it) computes,
for one utterance:

1. the waveform scaled to 16-bit range (x 2^15), 25 ms frames every 10 ms without centring, each
   frame's mean removed, pre-emphasis 0.97, the Povey window, a 512-point power spectrum, 80
   Kaldi mel triangles from 20 Hz to Nyquist, the log floored at float32 epsilon: exactly
   torchaudio's Kaldi ``fbank``, which :func:`ttscli.codecs.s3gen.xvector.kaldi_fbank` already
   computes (reused here, fed the scaled waveform);
2. per mel bin, the mean and the unbiased variance over the utterance's frames:
   ``(x - mean) / sqrt(var + 1e-7)``;
3. the frame count padded up to even with ``padding_value`` rows (1.0 in the published
   ``preprocessor_config.json``), then every ``stride`` (2) consecutive frames concatenated into
   one 160-wide row: 50 rows a second;
4. ``attention_mask``: row j is real when frame ``j * stride + 1`` is, so with an odd frame count
   the last row (a real frame and a padding frame) is masked.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ttscli.config import BaseArgs
from ttscli.errors import AudioInputError

FRAME = 400          # 25 ms at 16 kHz
HOP = 160            # 10 ms
PCM_SCALE = 2.0 ** 15
VAR_EPS = 1e-7
MIN_SAMPLES = FRAME + HOP   # two fbank frames: the unbiased variance needs two


@dataclass
class SeamlessArgs(BaseArgs):
    """``preprocessor_config.json`` of the w2v-BERT 2.0 folder (the published values are the defaults)."""

    feature_size: int = 80
    num_mel_bins: int = 80
    sampling_rate: int = 16000
    stride: int = 2
    padding_value: float = 1.0

    @classmethod
    def from_folder(cls, folder: str | Path) -> SeamlessArgs:
        return cls.from_file(Path(folder) / "preprocessor_config.json")


def seamless_inputs(wav16: np.ndarray, args: SeamlessArgs | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``input_features [T, num_mel_bins * stride]`` float32 and ``attention_mask [T]`` bool of a
    mono 16 kHz signal, as the extractor returns them for a batch of one."""
    from ttscli.codecs.s3gen.xvector import kaldi_fbank

    a = args or SeamlessArgs()
    if a.sampling_rate != 16000:
        raise AudioInputError(f"w2v-BERT features are defined at 16 kHz, the config says {a.sampling_rate} Hz")
    x = np.asarray(wav16, np.float32).reshape(-1)
    if x.shape[0] < MIN_SAMPLES:
        raise AudioInputError(f"reference audio too short for w2v-BERT features: {x.shape[0]} samples at 16 kHz "
                              f"(at least {MIN_SAMPLES})")
    fb = kaldi_fbank(x * np.float32(PCM_SCALE), n_bins=a.num_mel_bins).astype(np.float64)
    fb = (fb - fb.mean(axis=0)) / np.sqrt(fb.var(axis=0, ddof=1) + VAR_EPS)
    n = fb.shape[0]
    padded = n + n % 2
    valid = np.arange(padded) < n
    if padded > n:
        fb = np.concatenate([fb, np.full((padded - n, fb.shape[1]), a.padding_value)], axis=0)
    used = padded - padded % a.stride
    feats = fb[:used].reshape(used // a.stride, a.stride * fb.shape[1]).astype(np.float32)
    mask = valid[:used][np.arange(used) % a.stride == 1]
    return feats, mask


def seamless_features(wav16: np.ndarray, args: SeamlessArgs | None = None) -> np.ndarray:
    """``input_features [T, 160]`` of a mono 16 kHz signal (see :func:`seamless_inputs` for the mask)."""
    return seamless_inputs(wav16, args)[0]
