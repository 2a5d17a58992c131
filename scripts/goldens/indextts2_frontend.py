"""IndexTTS2's reference front end, computed by the upstream code: the resampling, the S2Mel
prompt mel, the Kaldi fbank and the CAMPPlus style vector of ``infer_generator``.

Run from the repository root after scripts/goldens/indextts2_fetch.sh, with the reference venv:

    INDEXTTS_SRC=../refsrc/index-tts INDEXTTS_DEPS=../refsrc/index-tts-deps \\
        REFVENV/bin/python scripts/goldens/indextts2_frontend.py

Writes ``tests/fixtures/indextts2/tiny/campplus_cn_common.bin``: upstream's ``CAMPPlus`` (3D-Speaker
CAM++, ``indextts/s2mel/modules/campplus/DTDNN.py``) at a narrow width (growth rate 4, bottleneck
x2, 8 initial channels; the published file is the same class at 32 / x4 / 128) with every tensor
re-initialised deterministically (BatchNorm statistics included), saved as ``torch.save`` of its
``state_dict`` as the published file is; and ``frontend.npz``: a 1.3 s test signal at 22.05 kHz
(``ref22``: chirp, harmonics and noise, the rate ``librosa.load`` gives upstream), its 16 kHz
version by torchaudio's ``Resample`` (``ref16``), the prompt mel (``ref_mel`` [80, T], upstream
``mel_spectrogram`` with the s2mel section's parameters), the Kaldi fbank minus its mean
(``fbank`` [T, 80]) and the style vector (``style`` [192]).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "indextts2"
SRC = Path(os.environ.get("INDEXTTS_SRC", ROOT.parent / "refsrc" / "index-tts"))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(SRC))
import reference_stubs  # noqa: F401  (torchaudio's CUDA-linked extension loader)
import torch
import torchaudio


def signal(sr: int = 22050, seconds: float = 1.3) -> np.ndarray:
    rng = np.random.default_rng(5)
    t = np.arange(int(sr * seconds)) / sr
    f0 = 110 + 90 * t
    phase = 2 * np.pi * np.cumsum(f0) / sr
    x = sum(0.3 / k * np.sin(k * phase) for k in range(1, 6)) * (0.6 + 0.4 * np.sin(2 * np.pi * 1.5 * t))
    return (x + 0.01 * rng.standard_normal(t.shape)).astype(np.float32)


def main() -> None:
    from indextts.s2mel.modules.audio import mel_spectrogram
    from indextts.s2mel.modules.campplus.DTDNN import CAMPPlus

    torch.manual_seed(0)
    campplus = CAMPPlus(feat_dim=80, embedding_size=192, growth_rate=4, bn_size=2, init_channels=8).eval()
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for name, p in list(campplus.named_parameters()) + list(campplus.named_buffers()):
            if name.endswith("num_batches_tracked"):
                continue
            if name.endswith("running_var"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif name.endswith("running_mean") or p.ndim == 1 and name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / np.sqrt(p[0].numel()))
    torch.save(campplus.state_dict(), OUT / "tiny" / "campplus_cn_common.bin")

    ref22 = signal()
    audio = torch.from_numpy(ref22)[None]
    audio16 = torchaudio.transforms.Resample(22050, 16000)(audio)
    mel = mel_spectrogram(audio, n_fft=1024, num_mels=80, sampling_rate=22050, hop_size=256, win_size=1024,
                          fmin=0, fmax=None)
    feat = torchaudio.compliance.kaldi.fbank(audio16, num_mel_bins=80, dither=0, sample_frequency=16000)
    feat = feat - feat.mean(dim=0, keepdim=True)
    with torch.inference_mode():
        style = campplus(feat.unsqueeze(0))
    np.savez_compressed(OUT / "frontend.npz", ref22=ref22, ref16=audio16[0].numpy(), ref_mel=mel[0].numpy(),
                        fbank=feat.numpy(), style=style[0].numpy())
    print("ref_mel", tuple(mel.shape), "fbank", tuple(feat.shape), "style", tuple(style.shape))


if __name__ == "__main__":
    main()
