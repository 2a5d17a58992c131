"""IndexTTS2's reference front end against upstream (scripts/goldens/indextts2_frontend.py): the
22.05 -> 16 kHz resampling, the S2Mel prompt mel, the Kaldi fbank and CAMPPlus's style vector
loaded from the published file layout (campplus_cn_common.bin, a torch state_dict)."""
from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli import torchfile
from ttscli.checkpoint import load_strict
from ttscli.codecs.s3gen.frontend import matcha_mel, resample
from ttscli.codecs.s3gen.xvector import CAMPPlus, campplus_args, kaldi_fbank

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
G = np.load(FIX / "frontend.npz")


def test_resample_22k_to_16k_is_torchaudio_s():
    ours = resample(G["ref22"], 22050, 16000)
    assert ours.shape == G["ref16"].shape
    assert np.abs(ours - G["ref16"]).max() <= 1e-5


def test_prompt_mel_is_upstream_mel_spectrogram():
    ours = matcha_mel(G["ref22"], 22050, 1024, 256, 80)
    assert ours.shape == G["ref_mel"].T.shape
    assert np.abs(ours - G["ref_mel"].T).max() <= 1e-3    # log domain, float32 FFT vs torch's


def test_style_vector_from_campplus_cn_common_layout():
    fb = kaldi_fbank(G["ref16"])
    fb = fb - fb.mean(axis=0, keepdims=True)
    assert np.abs(fb - G["fbank"]).max() <= 1e-3
    w = {k: mx.array(v) for k, v in torchfile.state_dict(FIX / "tiny" / "campplus_cn_common.bin").items()}
    model = load_strict(CAMPPlus(campplus_args(w)), w, source="campplus_cn_common.bin")
    style = np.array(model(mx.array(G["fbank"])))
    scale = np.abs(G["style"]).max()
    assert np.abs(style - G["style"]).max() <= 1e-4 * scale
