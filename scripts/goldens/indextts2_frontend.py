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

Also the folder's small data files at the fixture's feature width (32 for 1024): the emotion
matrices ``feat2.pt`` [73, 32] and ``feat1.pt`` [73, 192] and ``wav2vec2bert_stats.pt``
(``{"mean", "var"}`` [32]), random, saved by ``torch.save`` as published; and the emotion-vector
goldens of ``infer_generator`` for that style: the rows upstream's ``find_most_similar_cosine``
picks (``emo_index``), and the blended vector (``emovec_vector``) for ``emo_weights`` at
``emo_alpha`` 0.7 over the speaker's ``emovec_spk`` of goldens.npz.
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


def upstream_function(name: str):
    """One top-level function of infer_v2.py, compiled from upstream's source without importing the
    module (its imports load every model library)."""
    import ast

    import torch.nn.functional as F

    tree = ast.parse((SRC / "indextts" / "infer_v2.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    scope = {"torch": torch, "F": F}
    exec(compile(ast.Module([node], []), "infer_v2.py", "exec"), scope)
    return scope[name]


def emotion_goldens(style, gen) -> dict:
    """The emotion-vector branch of ``infer_generator``, step by step as upstream writes it."""
    emo_num = [3, 17, 2, 8, 4, 5, 10, 24]
    feat2 = torch.randn(sum(emo_num), 32, generator=gen)
    feat1 = torch.randn(sum(emo_num), 192, generator=gen)
    torch.save(feat2, OUT / "tiny" / "feat2.pt")
    torch.save(feat1, OUT / "tiny" / "feat1.pt")
    torch.save({"mean": 0.1 * torch.randn(32, generator=gen), "var": 0.5 + torch.rand(32, generator=gen)},
               OUT / "tiny" / "wav2vec2bert_stats.pt")
    find_most_similar_cosine = upstream_function("find_most_similar_cosine")
    emo_matrix, spk_matrix = torch.split(feat2, emo_num), torch.split(feat1, emo_num)
    weights = [0.0, 0.35, 0.0, 0.0, 0.0, 0.0, 0.5, 0.15]
    alpha = 0.7
    emo_vector = [int(x * alpha * 10000) / 10000 for x in weights]        # infer_generator's emo_alpha scaling
    weight_vector = torch.tensor(emo_vector)
    index = [find_most_similar_cosine(style, tmp) for tmp in spk_matrix]
    rows = torch.cat([tmp[i].unsqueeze(0) for i, tmp in zip(index, emo_matrix)], 0)
    emovec_mat = torch.sum(weight_vector.unsqueeze(1) * rows, 0).unsqueeze(0)
    emovec_spk = torch.from_numpy(np.load(OUT / "goldens.npz")["emovec_spk"])[None]
    emovec = emovec_mat + (1 - torch.sum(weight_vector)) * emovec_spk
    return {"emo_weights": np.array(weights, np.float64), "emo_alpha": np.float64(alpha),
            "emo_index": np.array([int(i) for i in index]), "emovec_vector": emovec[0].numpy()}


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
    emo = emotion_goldens(style, gen)
    np.savez_compressed(OUT / "frontend.npz", ref22=ref22, ref16=audio16[0].numpy(), ref_mel=mel[0].numpy(),
                        fbank=feat.numpy(), style=style[0].numpy(), **emo)
    print("ref_mel", tuple(mel.shape), "fbank", tuple(feat.shape), "style", tuple(style.shape))


if __name__ == "__main__":
    main()
