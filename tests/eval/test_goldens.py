"""DNSMOS and the GE2E voice encoder against goldens computed by speechmos 0.0.1.1 and
Resemblyzer 0.1.4 (torch, librosa) on the same clips: tests/fixtures/eval/make_goldens.py."""
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("onnxruntime")
pytest.importorskip("speechmos")

from ttscli.eval import features
from ttscli.eval.dnsmos import DNSMOS, WINDOW_S, p808_features

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "eval"
G = np.load(FIX / "goldens.npz")


def clip(name, rate=None):
    x, sr = sf.read(FIX / f"{name}.wav", dtype="float32")
    return (features.resample(x, sr, rate), rate) if rate else (x, sr)


@pytest.fixture(scope="module")
def dnsmos():
    return DNSMOS()


@pytest.mark.parametrize("name", ["joe", "espeak", "noise"])
def test_dnsmos_equals_speechmos(dnsmos, name):
    x, _ = clip(name, 16000)
    got = dnsmos(x)
    for field, key in (("sig", "sig_mos"), ("bak", "bak_mos"), ("ovrl", "ovrl_mos"), ("p808", "p808_mos")):
        assert abs(getattr(got, field) - float(G[f"dnsmos_{name}_{key}"])) < 1e-4, field


def test_dnsmos_ranks_speech_above_noise(dnsmos):
    speech, noise = dnsmos(clip("joe", 16000)[0]).ovrl, dnsmos(clip("noise", 16000)[0]).ovrl
    assert speech > 2.5 and noise < 1.5


def test_p808_features_equal_librosa():
    x = np.clip(clip("joe", 16000)[0], -1, 1)     # as DNSMOS.windows does (resampling overshoots)
    while len(x) < int(WINDOW_S * 16000):
        x = np.append(x, x)
    got = p808_features(x[: int(WINDOW_S * 16000)][:-160])
    want = G["dnsmos_joe_p808_features"]
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-4


@pytest.fixture(scope="module")
def encoder():
    pytest.importorskip("webrtcvad")
    from ttscli.eval.speaker import VoiceEncoder

    return VoiceEncoder()


@pytest.mark.parametrize("name", ["joe", "espeak"])
def test_speaker_preprocessing_equals_resemblyzer(name):
    pytest.importorskip("webrtcvad")
    from ttscli.eval.speaker import preprocess

    x, sr = clip(name)
    got, want = preprocess(x, sr), G[f"rz_{name}_wav"]
    assert got.shape == want.shape          # the VAD kept and cut the same windows
    assert np.abs(got - want).max() < 1e-6


def test_speaker_mel_equals_librosa():
    from ttscli.eval.speaker import HOP, N_FFT, N_MELS

    got = features.mel_spectrogram(G["rz_joe_wav"], 16000, N_FFT, HOP, N_MELS)
    want = G["rz_joe_mel"]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.parametrize("name", ["joe", "espeak"])
def test_speaker_embedding_equals_resemblyzer(encoder, name):
    from ttscli.eval.speaker import HOP, N_FFT, N_MELS, PARTIAL_FRAMES, partial_starts

    wav = G[f"rz_{name}_wav"]
    emb = encoder.embed_preprocessed(wav)
    assert np.abs(emb - G[f"rz_{name}_embed"]).max() < 1e-5
    # the partials one by one: same slicing, same LSTM
    starts = partial_starts(len(wav))
    assert len(starts) == len(G[f"rz_{name}_partials"])
    padded = np.pad(wav, (0, max(0, (starts[-1] + PARTIAL_FRAMES) * HOP - len(wav))))
    mel = features.mel_spectrogram(padded, 16000, N_FFT, HOP, N_MELS)
    partials = encoder.forward(np.stack([mel[s:s + PARTIAL_FRAMES] for s in starts]))
    assert np.abs(partials - G[f"rz_{name}_partials"]).max() < 1e-5


def test_speaker_weights_missing_is_one_clear_error(tmp_path):
    from ttscli.errors import ModelNotFoundError
    from ttscli.eval.speaker import VoiceEncoder

    with pytest.raises(ModelNotFoundError, match="--speaker-model .* is not a file"):
        VoiceEncoder(tmp_path / "absent.pt")
