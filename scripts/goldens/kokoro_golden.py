"""The `ttscli parity kokoro-82m --golden` fixture, computed by the published graph itself.

    .venv/bin/python scripts/goldens/kokoro_golden.py [OUT.npz]

kokoro-onnx's int8 graph rewritten into its float twin (reference.py) runs under onnxruntime
on misaki's phonemes of "The quick brown fox jumps over the lazy dog." with voice jf_alpha, row
len(phonemes) - 1, speed 1. Stored: tokens, style, speed, durations, f0, and the audio divided by
1.5 (the ONNX iSTFT's gain over torch.istft, i.e. hexgrad's level; docs/parity.md).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

PHONEMES = "ði kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ði lˈAzi dˈɔɡ."


def main() -> None:
    from ttscli.models.kokoro.load import (
        default_data_dir,
        joined_onnx,
        load_voices,
        read_vocab,
        style_row,
    )
    from ttscli.models.kokoro.pipeline import tokens_of
    from ttscli.models.kokoro.reference import ONNX_GAIN, OnnxKokoro
    from ttscli.paths import converted_dir

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("tests/fixtures/kokoro/en1_float_twin.npz")
    data = default_data_dir()
    tokens = tokens_of(PHONEMES, read_vocab(data / "vocab.json"))
    style = style_row(load_voices(data)["jf_alpha"], len(PHONEMES))
    ref = OnnxKokoro(joined_onnx(data, converted_dir("kokoro-82m")), float_twin=True)(tokens, style)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, tokens=np.array(tokens, np.int64), style=style.astype(np.float32),
                        speed=np.float32(1.0), durations=ref["durations"].reshape(-1).astype(np.float32),
                        f0=ref["f0"].reshape(-1).astype(np.float32),
                        audio=(ref["audio"] / ONNX_GAIN).astype(np.float32))
    print(f"wrote {out}: {len(tokens)} tokens, {ref['audio'].size} samples")


if __name__ == "__main__":
    main()
