"""Load Kyutai Pocket TTS exactly as published.

Layout (upstream pocket_tts/config/english.yaml and pocket_tts/utils/utils.py name the files):
``languages/<language>/model.safetensors`` (upstream TTSModel's state dict: ``flow_lm.*`` in
this package's names, ``mimi.*`` in Kyutai's layout), ``languages/<language>/tokenizer.json``
(the text table's tokenizer, read with ``tokenizers``) and ``languages/<language>/embeddings/
<voice>.safetensors`` (the built-in voices: the flow LM's KV cache after each voice prompt, as
upstream's ``export_model_state`` writes it). The folder passed may be the repository root or the
language folder itself. Strict: every tensor by name and shape, or a CheckpointError naming it
as the file spells it. An optional ``config.json`` beside the weights (upstream's config
sections as JSON) sets other sizes; without one the sizes are english.yaml's.

The same tensors under mlx-audio 0.6.2's names also load (what its ``Model.sanitize`` makes of
the published file, mlx_audio/tts/models/pocket_tts/weights.py ``map_weights``):
``speaker_proj_weight`` at the top level, SEANet ``model.N`` as ``init_conv1d`` /
``layers.S.residuals.R.block.B`` / ``layers.S.upsample|downsample`` / ``final_conv1d`` with one
more ``.conv``/``.convtr`` level, Mimi's ``linear1/2`` under ``gating.``, and conv weights
channels-last (``[out, k, in]``; transposed convs ``[out, k, in]`` from ``[in, out, k]``, the
depthwise upsample ``[C, k, 1]``). Each name and shape is checked as that file spells it, then
mapped back; float16/bfloat16 are cast to float32 as everywhere. Refused, one line each:
quantized tensors (packed uint32 with ``scales``), and pocket-tts 1.x's architecture (a voice
projection from Mimi's full width, ``speaker_proj_weight`` [1024, 512]), which is the model
mlx-audio 0.6.2 runs and not the one this family implements.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict, read_safetensors, shapes
from ttscli.codecs.mimi.kyutai import from_kyutai, kyutai_shapes
from ttscli.errors import BackendUnavailableError, CheckpointError, UsageError
from ttscli.models.base import LoadOptions

from .config import ModelArgs
from .model import PocketTTS

LANGUAGE = "languages/english"


def language_dir(path: Path) -> Path:
    """The folder holding model.safetensors: ``path`` itself or its ``languages/english``."""
    path = Path(path)
    if (path / "model.safetensors").is_file():
        return path
    if (path / LANGUAGE / "model.safetensors").is_file():
        return path / LANGUAGE
    raise CheckpointError(f"{path}: no model.safetensors (nor {LANGUAGE}/model.safetensors); pass the "
                          "kyutai/pocket-tts folder in its published layout")


def read_args(folder: Path) -> ModelArgs:
    f = folder / "config.json"
    if not f.exists():
        return ModelArgs()
    try:
        config = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{f} is not valid JSON ({e})") from None
    return ModelArgs.from_upstream(config, str(f))


def expected_shapes(model: PocketTTS) -> dict[str, tuple[int, ...]]:
    """The published file's names and shapes: flow_lm.* as the tree, mimi.* in Kyutai's layout."""
    own = shapes(dict(tree_flatten(model.parameters())))
    flow = {k: v for k, v in own.items() if k.startswith("flow_lm.")}
    mimi = {k[len("mimi."):]: v for k, v in own.items() if k.startswith("mimi.")}
    kyutai = kyutai_shapes(mimi, model.mimi.decoder.transposed)
    return {**flow, **{"mimi." + k: v for k, v in kyutai.items()}}


def to_model_names(weights: dict[str, mx.array], num_heads: int) -> dict[str, mx.array]:
    flow = {k: v for k, v in weights.items() if k.startswith("flow_lm.")}
    mimi = from_kyutai({k[len("mimi."):]: v for k, v in weights.items() if k.startswith("mimi.")}, num_heads)
    return {**flow, **{"mimi." + k: v for k, v in mimi.items()}}


def _seanet_names(side: str, ratios: int, residuals: int) -> dict[str, str]:
    """Kyutai's ``model.N[.block.K]`` of one SEANet -> mlx-audio's module path. The Sequential
    holds an ELU before each strided conv, so those indices are skipped."""
    names, i = {"model.0": "init_conv1d"}, 1
    for stage in range(ratios):
        if side == "decoder":
            names[f"model.{i + 1}"] = f"layers.{stage}.upsample"
            i += 2
        for r in range(residuals):
            names[f"model.{i}.block.1"] = f"layers.{stage}.residuals.{r}.block.0"
            names[f"model.{i}.block.3"] = f"layers.{stage}.residuals.{r}.block.1"
            i += 1
        if side == "encoder":
            names[f"model.{i + 1}"] = f"layers.{stage}.downsample"
            i += 2
    names[f"model.{i + 1}"] = "final_conv1d"
    return names


_SEANET_CONV = re.compile(r"^mimi\.(encoder|decoder)\.(model\.\d+(?:\.block\.\d+)?)\.(conv|convtr)\.(weight|bias)$")
_MIMI_FF = re.compile(r"^(mimi\.(?:encoder|decoder)_transformer\.transformer\.layers\.\d+)\.(linear[12]\.weight)$")


def mlx_audio_layout(expected: dict[str, tuple[int, ...]], args: ModelArgs
                     ) -> dict[str, tuple[str, tuple[int, ...], tuple[int, ...] | None]]:
    """mlx-audio's name -> (published name, mlx-audio's shape, axes taking mlx-audio's array back
    to the published one, or None) for every published tensor in ``expected``."""
    stages, residuals = len(args.mimi.upsampling_ratios), args.mimi.num_residual_layers
    seanet = {side: _seanet_names(side, stages, residuals) for side in ("encoder", "decoder")}
    out = {}
    for name, shape in expected.items():
        new, back = name, None
        if name == "flow_lm.speaker_proj_weight":
            new = "speaker_proj_weight"
        elif m := _SEANET_CONV.match(name):
            side, key, kind, leaf = m.groups()
            new = f"mimi.{side}.{seanet[side][key]}.{kind}.{kind}.{leaf}"
        elif m := _MIMI_FF.match(name):
            new = f"{m.group(1)}.gating.{m.group(2)}"
        elif name in ("mimi.downsample.conv.conv.weight", "mimi.upsample.convtr.convtr.weight"):
            new = name[: -len("weight")] + name.split(".")[-2] + ".weight"
        if name.startswith("mimi.") and len(shape) == 3:
            # torch [out, in, k] and transposed [in, out, k] -> MLX [out, k, in]; the depthwise
            # upsample [C, 1, k] -> [C, k, 1]
            forward = (1, 2, 0) if ".convtr." in name and not name.startswith("mimi.upsample.") else (0, 2, 1)
            back = tuple(int(a) for a in np.argsort(forward))
            shape = tuple(shape[a] for a in forward)
        out[new] = (name, tuple(shape), back)
    return out


def from_mlx_audio(weights: dict[str, mx.array], layout: dict) -> dict[str, mx.array]:
    """mlx-audio-named tensors (already checked against ``layout``) -> the published names and layouts."""
    out = {}
    for name, w in weights.items():
        published, _, back = layout[name]
        out[published] = w.transpose(back) if back is not None else w
    return out


def refuse_other_models(weights: dict[str, mx.array], args: ModelArgs, source: Path) -> None:
    """One line for checkpoints that are not the published float tensors under another name."""
    scales = [k for k in weights if k.endswith(".scales")]
    packed = sorted(k[: -len("scales")] + "weight" if k[: -len("scales")] + "weight" in weights else k
                    for k in scales)
    if packed:
        more = f" (+{len(packed) - 1} more)" if len(packed) > 1 else ""
        raise CheckpointError(f"{source}: {packed[0]}{more} is quantized (packed uint32 with scales, as "
                              "mlx-audio's convert --quantize writes); Pocket TTS loads float weights only: use "
                              "an unquantized conversion or kyutai/pocket-tts")
    proj = weights.get("speaker_proj_weight", weights.get("flow_lm.speaker_proj_weight"))
    if proj is not None and proj.ndim == 2 and proj.shape[1] != args.latent_dim \
            and proj.shape[1] == args.mimi.hidden_size:
        raise CheckpointError(f"{source}: speaker_proj_weight is {list(proj.shape)}, a voice projection from Mimi's "
                              f"{proj.shape[1]}-wide embedding: pocket-tts 1.x's architecture (the one mlx-audio "
                              f"0.6.2 runs), not pocket-tts 4.0.1's {args.latent_dim}-wide latents; pass "
                              "kyutai/pocket-tts (languages/english)")


def load_model(path: Path) -> PocketTTS:
    folder = language_dir(path)
    model = PocketTTS(read_args(folder))
    source = folder / "model.safetensors"
    heads = model.args.mimi.num_attention_heads
    weights = read_safetensors(source)
    refuse_other_models(weights, model.args, source)
    expected = expected_shapes(model)
    if any(".decoder.model." in k for k in weights) or not any(
            k == "speaker_proj_weight" or ".init_conv1d." in k for k in weights):
        sanitize = lambda w: to_model_names(w, heads)  # noqa: E731
        hint = "Pocket TTS tensors by their published names (flow_lm.*, mimi.*)"
    else:
        layout = mlx_audio_layout(expected, model.args)
        expected = {k: shape for k, (_, shape, _) in layout.items()}
        sanitize = lambda w: to_model_names(from_mlx_audio(w, layout), heads)  # noqa: E731
        hint = "Pocket TTS tensors under mlx-audio 0.6.2's names"
    load_strict(model, weights, source=str(source), expected=expected, sanitize=sanitize, dtype="float32",
                hint=hint)
    return model


def random_model() -> PocketTTS:
    """english.yaml's dimensions with random weights (:func:`ttscli.nn.init.random_weights`)."""
    from ttscli.nn.init import random_weights

    def rule(name: str, w: mx.array, normal: mx.array) -> mx.array:
        # a unit latent scale keeps the decoder's input at the magnitude its weights expect
        return mx.ones(w.shape) if name.endswith("emb_std") else w

    return random_weights(PocketTTS(ModelArgs()), rule=rule)


class TextTokenizer:
    """upstream's JsonTokenizer: ``tokenizer.json`` ids as they are, no specials added."""

    def __init__(self, tok):
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids


def load_tokenizer(folder: Path, n_bins: int) -> TextTokenizer:
    from tokenizers import Tokenizer

    f = folder / "tokenizer.json"
    if not f.exists():
        raise CheckpointError(f"{f} is missing; Pocket TTS reads its text through it")
    try:
        tok = Tokenizer.from_file(str(f))
    except Exception as e:  # noqa: BLE001  (tokenizers raises a bare Exception on a bad file)
        raise CheckpointError(f"{f} is not a readable tokenizer ({e})") from None
    if tok.get_vocab_size() != n_bins:
        raise CheckpointError(f"{f}: {tok.get_vocab_size()} tokens, but the text table has {n_bins} "
                              "(flow_lm.conditioner.embed.weight rows - 1)")
    return TextTokenizer(tok)


def voice_files(folder: Path | None) -> dict[str, Path]:
    if folder is None:
        return {}
    emb = folder / "embeddings"
    return {p.stem: p for p in sorted(emb.glob("*.safetensors"))} if emb.is_dir() else {}


def voice_names(spec: Any, checkpoint: Path | None) -> list[str]:
    if checkpoint is None:
        return list(getattr(spec, "capabilities", {}).get("voices", []) or [])
    try:
        return list(voice_files(language_dir(checkpoint)))
    except CheckpointError:
        return []


def read_voice_state(path: Path, model: PocketTTS) -> list[tuple[mx.array, mx.array]]:
    """A voice state file -> per layer (keys, values) ``[1, heads, T, head_dim]``, as the flow
    LM's cache holds them after the voice prompt (keys already rotated)."""
    try:
        raw = read_safetensors(path)
    except Exception as e:  # noqa: BLE001  (a truncated or foreign file: one line naming it)
        raise UsageError(f"{path} is not a readable voice state ({e})") from None
    a = model.args.flow_lm
    layers = []
    for i in range(a.num_layers):
        name = f"transformer.layers.{i}.self_attn"
        cache = raw.get(f"{name}/cache")
        if cache is None:
            raise UsageError(f"{path}: no {name}/cache; not a Pocket TTS voice state")
        if cache.ndim != 5 or cache.shape[0] != 2 or cache.shape[1] != 1 or \
                tuple(cache.shape[3:]) != (a.num_heads, a.d_model // a.num_heads):
            raise UsageError(f"{path}: {name}/cache has shape {list(cache.shape)}, the model needs "
                             f"[2, 1, T, {a.num_heads}, {a.d_model // a.num_heads}]")
        if f"{name}/offset" in raw:
            length = int(np.asarray(raw[f"{name}/offset"]).reshape(-1)[0])
        elif f"{name}/current_end" in raw:
            length = int(raw[f"{name}/current_end"].shape[0])
        else:
            raise UsageError(f"{path}: no {name}/offset; not a Pocket TTS voice state")
        if not 0 < length <= cache.shape[2]:
            raise UsageError(f"{path}: {name} offset {length} is outside its cache of {cache.shape[2]}")
        kv = cache[:, :, :length].astype(mx.float32).transpose(0, 1, 3, 2, 4)
        mx.eval(kv)
        layers.append((kv[0], kv[1]))
    return layers


def load_pipeline(spec: Any, checkpoint: Path | None, options: LoadOptions):
    from ttscli.lm import MLXCodeDecoder
    from ttscli.text import ByteTokenizer

    from .pipeline import PocketPipeline

    from ttscli.backends.select import split_backend

    for component, name in options.backends.items():
        if name != "mlx" and not (component == "flow_lm" and split_backend(name)[0] == "onnx"):
            raise BackendUnavailableError(f"{spec.id} {component}: backend {name!r} is not available "
                                          "(flow_lm: mlx or onnx[-f32|-int8|-int4]; speech_decoder: mlx)")
    if options.dtype not in (None, "float32"):
        raise UsageError(f"{spec.id} runs in float32 (upstream's dtype); drop --dtype {options.dtype}")
    if options.prefill_mode == "sequential":
        raise UsageError(f"{spec.id}: --prefill-mode sequential is not offered (its prompts are short)")
    if options.random_weights:
        model = random_model()
        tokenizer = ByteTokenizer({}, byte_offset=0)
        voices: dict[str, Path] = {}
        folder = None
    else:
        folder = language_dir(Path(checkpoint))
        model = load_model(folder)
        tokenizer = load_tokenizer(folder, model.args.flow_lm.n_bins)
        voices = voice_files(folder)
    backend = options.backend("flow_lm")
    if split_backend(backend)[0] == "onnx":
        from .onnx_decoder import load_decoder

        decoder = load_decoder(backend, model.flow_lm, model.args.latent_dim, folder, getattr(spec, "id", None))
        backend = f"onnx-{decoder.precision}"
    else:
        decoder = MLXCodeDecoder(model.flow_lm, compiled=False)
    pipe = PocketPipeline(spec, model, tokenizer, decoder, voices, folder)
    pipe.backends["flow_lm"] = backend
    return pipe
