"""The published layout (openbmb/VoxCPM2) -> the model: config.json, model.safetensors (or
pytorch_model.bin) and audiovae.safetensors (or audiovae.pth), read strictly."""
from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict, read_safetensors, shapes
from ttscli.codecs.audiovae import fold_weight_norm
from ttscli.errors import CheckpointError
from ttscli.models.voxcpm2.config import ModelArgs
from ttscli.models.voxcpm2.model import VoxCPM2


def _first(folder: Path, names: tuple[str, ...]) -> Path:
    for n in names:
        if (folder / n).is_file():
            return folder / n
    raise CheckpointError(f"{folder}: none of {', '.join(names)} found")


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
    main = _first(folder, ("model.safetensors", "pytorch_model.bin"))
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
                sanitize=fold_weight_norm)
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
