"""The published layout (openbmb/VoxCPM2) -> the pipeline: config.json, model.safetensors (or
pytorch_model.bin), audiovae.safetensors (or audiovae.pth) and tokenizer.json, read strictly;
or the released dimensions with random weights (``--random-weights``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict, read_safetensors, shapes
from ttscli.codecs.audiovae import fold_weight_norm
from ttscli.errors import BackendUnavailableError, CheckpointError, UsageError
from ttscli.models.base import LoadOptions
from ttscli.models.voxcpm2.config import ModelArgs
from ttscli.models.voxcpm2.model import VoxCPM2


def _first(folder: Path, names: tuple[str, ...]) -> Path:
    for n in names:
        if (folder / n).is_file():
            return folder / n
    raise CheckpointError(f"{folder}: none of {', '.join(names)} found")


MAIN_FILES = ("model.safetensors", "pytorch_model.bin")


def main_file(folder: Path) -> str:
    """The name of the checkpoint's main weights file (model.safetensors or pytorch_model.bin)."""
    return _first(Path(folder), MAIN_FILES).name


def _read(path: Path) -> dict:
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    from ttscli import torchfile

    obj = torchfile.load(path)      # upstream reads checkpoint.get("state_dict", checkpoint)
    key = "state_dict" if isinstance(obj, dict) and "state_dict" in obj else None
    return {k: mx.array(v) for k, v in torchfile.state_dict(path, key=key).items()}


def _vae_expected(vae_params: dict) -> dict[str, tuple[int, ...]]:
    """The AudioVAE's tensors as the file spells them: each conv weight as weight_g / weight_v,
    and the decoder's rate boundaries."""
    out: dict[str, tuple[int, ...]] = {}
    for k, shape in vae_params.items():
        if k.endswith(".weight") and len(shape) == 3:
            out[k + "_v"] = shape
            out[k + "_g"] = (shape[0], 1, 1)
        else:
            out[k] = shape
    return out


def load_model(folder: Path, dtype=None) -> VoxCPM2:
    folder = Path(folder)
    args = ModelArgs.read(json.loads((folder / "config.json").read_text()), source=str(folder / "config.json"))
    model = VoxCPM2(args)
    params = shapes(dict(tree_flatten(model.parameters())))
    main = _first(folder, MAIN_FILES)
    vae_file = _first(folder, ("audiovae.safetensors", "audiovae.pth"))
    weights = _read(main)
    vae = _read(vae_file)
    bounds = vae.get("decoder.sr_bin_boundaries")
    if bounds is not None and list(np.asarray(bounds)) != list(args.vae.sr_bin_boundaries or []):
        raise CheckpointError(f"{vae_file}: decoder.sr_bin_boundaries {np.asarray(bounds).tolist()} differ from "
                              f"config.json's {args.vae.sr_bin_boundaries}")
    vae.pop("decoder.sr_bin_boundaries", None)
    vae_params = {k[len("audio_vae."):]: v for k, v in params.items() if k.startswith("audio_vae.")}
    load_strict(model.audio_vae, vae, source=str(vae_file), expected=_vae_expected(vae_params),
                sanitize=fold_weight_norm, dtype="float32")      # upstream decodes in float32
    lm_params = {k: v for k, v in params.items() if not k.startswith("audio_vae.")}
    core = {k: v for k, v in weights.items()}
    load_strict(_Core(model), core, source=str(main), expected=lm_params, dtype=dtype)
    return model


class _Core:
    """Loads the non-VAE tensors into the model (strict over exactly those names)."""

    def __init__(self, model: VoxCPM2):
        self.model = model

    def load_weights(self, items, strict: bool = True):
        self.model.load_weights(items, strict=False)

    def parameters(self):
        return self.model.parameters()


# openbmb/VoxCPM2's config.json at the sizes docs/models/voxcpm2.md lists: what --random-weights
# builds (and benchmarks/bench_voxcpm2_peer.py builds upstream's model from).  The LongRoPE
# factors only matter past the original context (not the case: both 32768), so unit factors
# stand in for the published ones.
RELEASE_CONFIG = Path(__file__).with_name("release_config.json")


def default_dtype() -> str:
    """The LM, encoder and DiT's dtype when none is asked: upstream's bfloat16 on a GPU, float32
    on a CPU, where MLX's bfloat16 matrix products run about 3x slower than float32's (the
    AudioVAE is float32 everywhere, as upstream runs it)."""
    return "bfloat16" if mx.default_device() == mx.gpu else "float32"


def random_model(dtype: str | None = None) -> VoxCPM2:
    """The released dimensions with random weights (:func:`ttscli.nn.init.random_weights`); the
    AudioVAE stays float32 as upstream runs it."""
    from ttscli.nn.init import random_weights

    def rule(name: str, w: mx.array, normal: mx.array) -> mx.array:
        # snake alphas of 1 and unit rate scales keep the decoder's signal at its input's size
        if name.endswith(("alpha", "scale_embed.weight")):
            return mx.ones(w.shape)
        return w

    model = VoxCPM2(ModelArgs.read(json.loads(RELEASE_CONFIG.read_text()), source=str(RELEASE_CONFIG)))
    return random_weights(model, dtype=dtype or default_dtype(), rule=rule,
                          keep_float32=lambda name: name.startswith("audio_vae."))


def load_pipeline(spec: Any, checkpoint: Path | None, options: LoadOptions):
    from ttscli.text import ByteTokenizer

    from .pipeline import VoxCPM2Pipeline
    from .tokenizer import load_tokenizer

    from ttscli.backends.select import split_backend

    for component, name in options.backends.items():
        if name != "mlx" and not (component in ("flow_estimator", "lm") and split_backend(name)[0] == "onnx"
                                  or component == "patch_encoder" and name == "onnx"
                                  or component == "lm" and name == "coreml"):
            raise BackendUnavailableError(f"VoxCPM2 {component}: backend {name!r} is not available "
                                          "(lm: mlx, coreml or onnx[-f32|-int8|-int4]; flow_estimator: mlx or "
                                          "onnx[-f32|-int8|-int4]; patch_encoder: mlx or onnx; the rest: mlx)")
    lm_backend = options.backend("lm")
    if lm_backend == "coreml":       # before any weight loads
        from ttscli.backends.coreml import require_converted

        require_converted("VoxCPM2's LMs", "voxcpm2", options.random_weights)
    if split_backend(lm_backend)[0] == "onnx":       # before any weight loads
        from .onnx_lm import check_options

        check_options(options)
    dit_dtype = options.dtype or default_dtype()
    dit_backend, enc_backend = options.backend("flow_estimator"), options.backend("patch_encoder")
    if split_backend(dit_backend)[0] == "onnx" and dit_dtype != "float32":
        # before any weight loads
        raise UsageError(f"VoxCPM2's diffusion transformer on onnxruntime computes in float32, not {dit_dtype}; "
                         "use --backend flow_estimator=mlx (or --dtype float32)")
    if enc_backend == "onnx" and dit_dtype != "float32":
        raise UsageError(f"VoxCPM2's patch encoder on onnxruntime computes in float32, not {dit_dtype}; "
                         "use --backend patch_encoder=mlx (or --dtype float32)")
    if options.prefill_mode == "sequential":
        raise UsageError(f"{spec.id}: --prefill-mode sequential is not offered (one prefill of the prompt)")
    if options.random_weights:
        model = random_model(options.dtype)
        tokenizer = ByteTokenizer({}, byte_offset=0)
    else:
        model = load_model(Path(checkpoint), dtype=options.dtype or default_dtype())
        tokenizer = load_tokenizer(Path(checkpoint))
        vocab = model.args.lm_config["vocab_size"]
        if tokenizer.vocab_size > vocab:
            raise CheckpointError(f"{checkpoint}/tokenizer.json has {tokenizer.vocab_size} tokens, more than the "
                                  f"LM's vocabulary of {vocab} (config.json lm_config.vocab_size)")
    if split_backend(dit_backend)[0] == "onnx":
        from .onnx_local import attach

        # a flow integrates its error over its steps: plain "onnx" is float32 here (int8 only by name)
        precision = "float32" if dit_backend.lower() == "onnx" else split_backend(dit_backend)[1]
        dit_backend = f"onnx-{precision}"
        attach(model, None if options.random_weights else Path(checkpoint), getattr(spec, "id", None), precision)
    if enc_backend == "onnx":
        from .onnx_local import attach_encoder

        attach_encoder(model, None if options.random_weights else Path(checkpoint), getattr(spec, "id", None))
    if split_backend(lm_backend)[0] == "onnx":
        from .onnx_lm import attach as attach_lms

        lm_backend = attach_lms(model, lm_backend, None if options.random_weights else Path(checkpoint),
                                getattr(spec, "id", None))
    elif lm_backend == "coreml":
        from .coreml_export import attach as attach_coreml

        lm_backend = attach_coreml(model, Path(checkpoint), options.coreml_compute_units)
    return VoxCPM2Pipeline(spec, model, tokenizer, lm_backend, dit_backend, enc_backend)
