"""DNSMOS P.835 (SIG, BAK, OVRL) and P.808 from the ONNX models the `speechmos` package ships.

The windowing, features and polynomial calibration follow speechmos 0.0.1.1 (itself Microsoft's
DNS-Challenge scoring script): 9.01 s windows one second apart over audio repeated up to that
length, the P.835 model on raw samples, the P.808 model on a 120-band log-mel spectrogram.
speechmos's own module imports librosa and requests; only its model files are used here.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ttscli.eval import features, require

SAMPLE_RATE = 16000
WINDOW_S = 9.01
# P.835 raw scores -> MOS (the non-personalised calibration)
_SIG = np.poly1d([-0.08397278, 1.22083953, 0.0052439])
_BAK = np.poly1d([-0.13166888, 1.60915514, -0.39604546])
_OVRL = np.poly1d([-0.06766283, 1.11546468, 0.04602535])


@dataclass
class MOS:
    sig: float
    bak: float
    ovrl: float
    p808: float


def model_files() -> tuple[Path, Path]:
    require("speechmos", "DNSMOS")
    folder = Path(str(resources.files("speechmos").joinpath("dnsmos_models")))
    p835, p808 = folder / "sig_bak_ovr.onnx", folder / "model_v8.onnx"
    for f in (p835, p808):
        if not f.is_file():
            from ttscli.errors import ModelNotFoundError

            raise ModelNotFoundError(f"DNSMOS: {f} is missing; reinstall speechmos")
    return p835, p808


def p808_features(segment: np.ndarray) -> np.ndarray:
    """(frames, 120) log-mel input of the P.808 model, scaled as it was trained: (dB + 40) / 40."""
    mel = features.mel_spectrogram(segment, SAMPLE_RATE, n_fft=321, hop=160, n_mels=120)
    return ((features.power_to_db(mel) + 40.0) / 40.0).astype(np.float32)


class DNSMOS:
    def __init__(self, threads: int = 0):
        require("onnxruntime", "DNSMOS")
        import onnxruntime as ort

        p835, p808 = model_files()
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        self.p835 = ort.InferenceSession(str(p835), opts, providers=["CPUExecutionProvider"])
        self.p808 = ort.InferenceSession(str(p808), opts, providers=["CPUExecutionProvider"])

    def windows(self, audio: np.ndarray):
        audio = np.clip(np.asarray(audio, np.float32), -1.0, 1.0)
        if not len(audio):
            return
        need = int(WINDOW_S * SAMPLE_RATE)
        while len(audio) < need:                    # short clips: repeated, as the scoring script does
            audio = np.append(audio, audio)
        hops = int(np.floor(len(audio) / SAMPLE_RATE) - WINDOW_S) + 1
        for i in range(hops):
            seg = audio[int(i * SAMPLE_RATE): int((i + WINDOW_S) * SAMPLE_RATE)]
            if len(seg) >= need:
                yield seg

    def __call__(self, audio: np.ndarray) -> MOS:
        """Scores of 16 kHz mono float audio (clipped to [-1, 1]), averaged over its windows."""
        rows = []
        for seg in self.windows(audio):
            raw = self.p835.run(None, {"input_1": seg[None, :].astype(np.float32)})[0][0]
            p808 = self.p808.run(None, {"input_1": p808_features(seg[:-160])[None]})[0][0][0]
            rows.append((_SIG(raw[0]), _BAK(raw[1]), _OVRL(raw[2]), p808))
        if not rows:
            from ttscli.errors import AudioInputError

            raise AudioInputError("DNSMOS: the audio is empty")
        sig, bak, ovrl, p808 = (float(v) for v in np.mean(np.array(rows, np.float64), axis=0))
        return MOS(sig=sig, bak=bak, ovrl=ovrl, p808=p808)
