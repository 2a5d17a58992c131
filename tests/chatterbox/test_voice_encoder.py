"""Chatterbox voice encoder against upstream VoiceEncoder.embeds_from_wavs (tiny LSTM, real front end)."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from ttscli.errors import AudioInputError
from ttscli.models.chatterbox.load import load_voice_encoder
from ttscli.models.chatterbox.voice_encoder import mel_power, partials, trim_silence

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"
G = np.load(FIX / "t3_goldens.npz")


@pytest.fixture(scope="module")
def ve():
    return load_voice_encoder(FIX / "tiny")


def test_front_end(ve):
    wav = trim_silence(G["ve_wav"], 20)
    assert len(wav) == int(G["ve_trimmed_len"]) < len(G["ve_wav"])     # the quiet ends were cut
    mel = mel_power(wav, ve.args)
    np.testing.assert_allclose(mel, G["ve_mel"], rtol=1e-4, atol=1e-6 * G["ve_mel"].max())
    p = partials(mel, ve.args)
    assert p.shape[1:] == (160, 40) and len(p) == 2   # 273 frames: a third partial would cover < 80 %


def test_embedding(ve):
    got = ve.embed(G["ve_wav"])
    assert got.shape == (1, 256)
    np.testing.assert_allclose(got, G["ve_embed"], atol=1e-5)


def test_silence_is_refused(ve):
    with pytest.raises(AudioInputError, match="silent"):
        ve.embed(np.zeros(16000, np.float32))
