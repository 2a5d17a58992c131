"""The published Chatterbox folder (t3_cfg.safetensors, ve.safetensors, tokenizer.json, conds.pt;
s3gen.safetensors is s3gen/'s) -> our modules, strictly: a missing, unexpected or mis-shaped
tensor is one error naming it."""
from __future__ import annotations

from pathlib import Path

from ttscli.checkpoint import load_strict, read_safetensors, shapes
from ttscli.errors import CheckpointError
from ttscli.models.chatterbox.config import T3Args, VEArgs


def _file(folder: Path, name: str) -> Path:
    p = Path(folder) / name
    if not p.is_file():
        raise CheckpointError(f"{folder}: no {name} (a Chatterbox folder holds t3_cfg.safetensors, "
                              f"s3gen.safetensors, ve.safetensors, tokenizer.json and conds.pt)")
    return p


def load_t3(folder: Path | None, dtype: str | None = "float32", random_weights: bool = False):
    """T3 from ``folder/t3_cfg.safetensors``; ``random_weights``: the published size, random."""
    import mlx.core as mx

    from ttscli.models.chatterbox.t3 import T3

    if random_weights:
        model = T3(T3Args())
        if dtype is not None:
            from ttscli.dtypes import to_dtype

            model.set_dtype(to_dtype(dtype))
        mx.eval(model.parameters())
        return model
    path = _file(folder, "t3_cfg.safetensors")
    weights = read_safetensors(path)
    if "model" in weights:      # the reference also accepts a nested {"model": [state]}; the hub file is flat
        raise CheckpointError(f"{path}: nested 'model' layout is not the published one")
    model = T3(T3Args.from_weights(shapes(weights), str(path)))
    return load_strict(model, weights, source=str(path), dtype=dtype)


def load_voice_encoder(folder: Path | None, random_weights: bool = False):
    import mlx.core as mx

    from ttscli.models.chatterbox.voice_encoder import VoiceEncoder

    if random_weights:
        model = VoiceEncoder(VEArgs())
        mx.eval(model.parameters())
        return model
    path = _file(folder, "ve.safetensors")
    weights = read_safetensors(path)
    model = VoiceEncoder(VEArgs.from_weights(shapes(weights), str(path)))
    return load_strict(model, weights, source=str(path), dtype="float32")


def load_tokenizer(folder: Path):
    from ttscli.models.chatterbox.tokenizer import EnTokenizer

    return EnTokenizer(_file(folder, "tokenizer.json"))


def load_conds(folder: Path):
    """The default voice, read through the tensors-only torch reader."""
    from ttscli.models.chatterbox.conds import Conditionals

    return Conditionals.from_torch(_file(folder, "conds.pt"))
