"""Load BreezeBlue/Breeze-TTS-2 exactly as published.

Files: ``config.json`` (nested component configs; see config.py for the decoy top-level
fields), ``generation_config.json``, ``model.safetensors.index.json`` + its bf16 shards (or one
``model.safetensors``, as ``ttscli convert`` writes), the Gemma ``tokenizer.json`` (read with
``tokenizers``) and ``audio_tokenizer/`` (the Qwen3-TTS 12 Hz tokenizer, loaded by that family's
code). Strict: every tensor the model needs, by name and shape, or a CheckpointError naming it.
Ignored by name only: ``embed_text_tokens.weight`` (unused when a text encoder exists, 1.07 GB)
and the leftover ``codec_model.*`` Mimi (decoding goes through audio_tokenizer/). The backbone's
audio table ``backbone_model.embed_tokens.embed_audio_tokens.weight`` is tied to
``depth_decoder.model.embed_tokens.weight`` and not stored upstream; a file that carries it
(mlx-audio's conversions copy it) must hold the same shape, and the depth table is used.

Other published conversions (judged from mlx-audio 0.6.2's converter, not from their files,
which were not reachable here): ``mlx-community/Breeze-TTS-2-mlx`` (bf16) keeps these tensor
names, the copied tie and ``embed_text_tokens``, drops ``codec_model.*``; linears are [out, in]
in both frameworks and ``codebooks_head`` keeps its [15, in, out] layout, so it loads. The
``-8bit``/``-4bit`` ones store packed weights without our config marker and are refused with
the tensor named (:mod:`ttscli.quantize`).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten

from ttscli import quantize
from ttscli.checkpoint import load_strict, read_safetensors, shapes
from ttscli.config import read_json
from ttscli.errors import BackendUnavailableError, CheckpointError, UsageError
from ttscli.models.base import LoadOptions
from ttscli.models.breeze_tts.config import GenerationConfig, ModelArgs
from ttscli.models.breeze_tts.model import BreezeModel

TIED = "backbone_model.embed_tokens.embed_audio_tokens.weight"
UNUSED = ("embed_text_tokens.", "codec_model.")
# sampled heads stay float32 whatever the compute dtype
FLOAT32 = ("lm_head.weight", "depth_decoder.codebooks_head.weight")
SPECIALS = ("<|AUDIO|>", "<|audio_eos|>", "[S0]", "<ins_bos>", "<ins_eos>")


def read_weights(path: Path) -> tuple[dict[str, mx.array], str]:
    """All tensors of the sharded checkpoint (via its index) or of one model.safetensors."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        try:
            wmap = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index} is not a safetensors index ({e})") from None
        weights: dict[str, mx.array] = {}
        for shard in sorted(set(wmap.values())):
            f = path / shard
            if not f.exists():
                raise CheckpointError(f"{f} is missing (listed in {index.name})")
            part = read_safetensors(f)
            stray = sorted(k for k in part if wmap.get(k) != shard)
            if stray:
                raise CheckpointError(f"{f}: {stray[0]} is not listed for this shard in {index.name}")
            weights.update(part)
        absent = sorted(set(wmap) - set(weights))
        if absent:
            raise CheckpointError(f"{index}: {absent[0]} is listed but in no shard")
        return weights, str(path / "model-*.safetensors")
    single = path / "model.safetensors"
    if single.exists():
        return read_safetensors(single), str(single)
    raise CheckpointError(f"{path}: no model.safetensors.index.json or model.safetensors; "
                          "pass the Breeze-TTS-2 folder in its published layout")


def sanitize(weights: dict[str, mx.array], source: str) -> dict[str, mx.array]:
    out = {k: v for k, v in weights.items() if not k.startswith(UNUSED)}
    tied = out.pop(TIED, None)
    table = out.get("depth_decoder.model.embed_tokens.weight")
    if tied is not None and table is not None and tied.shape != table.shape:
        raise CheckpointError(f"{source}: {TIED} {list(tied.shape)} does not match the tied "
                              f"depth_decoder.model.embed_tokens.weight {list(table.shape)}")
    return out


def build(args: ModelArgs) -> BreezeModel:
    return BreezeModel(args)


def load_model(path: Path, dtype: str | None = None) -> tuple[BreezeModel, GenerationConfig]:
    path = Path(path)
    config = read_json(path / "config.json")
    args = ModelArgs.from_dict(config, source=str(path / "config.json"))
    model = BreezeModel(args)
    weights, source = read_weights(path)
    weights = sanitize(weights, source)
    quantize.prepare(model, config, weights, source)
    expected = shapes(dict(tree_flatten(model.parameters())))
    load_strict(model, weights, source=source, expected=expected, dtype=dtype or "float32",
                keep_dtype=lambda k: k in FLOAT32,
                hint="Breeze-TTS-2 tensors by their published names")
    for k in FLOAT32:  # a bf16 file's heads compute in float32 (upstream's streaming path does)
        mod = model.lm_head if k.startswith("lm_head") else model.depth_decoder.codebooks_head
        if "scales" not in mod and mod.weight.dtype != mx.float32:
            mod.weight = mod.weight.astype(mx.float32)
    gen_path = path / "generation_config.json"
    gen = GenerationConfig.from_file(gen_path) if gen_path.exists() else GenerationConfig()
    return model, gen


class TextTokenizer:
    """The Gemma tokenizer: ``encode(text)`` with upstream's add_special_tokens=True (a <bos>
    first, no EOS); special tokens such as [S0] and <ins_bos> are matched whole."""

    def __init__(self, tok):
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=True).ids

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)


def load_tokenizer(path: Path, args: ModelArgs) -> TextTokenizer:
    from tokenizers import Tokenizer

    f = Path(path) / "tokenizer.json"
    if not f.exists():
        raise CheckpointError(f"{f} is missing; the Breeze folder ships its Gemma tokenizer.json")
    try:
        tok = TextTokenizer(Tokenizer.from_file(str(f)))
    except Exception as e:  # noqa: BLE001  (tokenizers raises a bare Exception on a bad file)
        raise CheckpointError(f"{f} is not a readable tokenizer ({e})") from None
    missing = [s for s in SPECIALS if tok.token_to_id(s) is None]
    if missing:
        raise CheckpointError(f"{f}: special token(s) {', '.join(missing)} missing: not Breeze's tokenizer")
    if tok.token_to_id("<|AUDIO|>") != args.audio_token_id or \
            tok.token_to_id("<|audio_eos|>") != args.audio_eos_token_id:
        raise CheckpointError(f"{f}: <|AUDIO|>/<|audio_eos|> ids do not match config.json's "
                              f"audio_token_id {args.audio_token_id} / audio_eos_token_id {args.audio_eos_token_id}")
    if (tok.token_to_id("<ins_eos>") or 0) >= args.text_encoder_config.vocab_size:
        raise CheckpointError(f"{f}: token ids exceed the text encoder's vocabulary "
                              f"({args.text_encoder_config.vocab_size})")
    return tok


def check_codec(args: ModelArgs, decoder_args, folder: Path) -> None:
    """The backbone/depth codes and the audio tokenizer must agree (each loads strictly alone)."""
    problems = []
    if decoder_args.num_quantizers != args.num_codebooks:
        problems.append(f"the model emits {args.num_codebooks} codebooks, the decoder reads "
                        f"{decoder_args.num_quantizers}")
    if decoder_args.codebook_size < args.codebook_size:
        problems.append(f"the model emits codes up to {args.codebook_size - 1}, the decoder's codebook_size is "
                        f"{decoder_args.codebook_size}")
    if problems:
        raise CheckpointError(f"{folder}: config.json and audio_tokenizer/config.json do not match: "
                              + "; ".join(problems))


def random_model(dtype: str) -> BreezeModel:
    """The real dimensions with random weights (:func:`ttscli.nn.init.random_weights`), made one
    tensor at a time in ``dtype`` so the peak is the model itself (never a float32 copy of 2.9 B
    parameters); the sampled heads stay float32 as loaded checkpoints' do."""
    from ttscli.models.breeze_tts.config import real_config
    from ttscli.nn.init import random_weights

    model = BreezeModel(ModelArgs.from_dict(real_config(), source="real config"))
    return random_weights(model, dtype=dtype, keep_float32=lambda k: k in FLOAT32)


def load_pipeline(spec: Any, checkpoint: Path | None, options: LoadOptions):
    from ttscli.lm import MLXCodeDecoder
    from ttscli.models.breeze_tts.config import GenerationConfig
    from ttscli.models.breeze_tts.pipeline import BreezePipeline
    from ttscli.text import ByteTokenizer
    from ttscli.codecs.qwen3_12hz import build_random_decoder, load_speech_decoder

    backend = options.backend("code_decoder")
    for component, name in options.backends.items():
        # the depth decoder (code_predictor) runs where the backbone's graph does: it follows
        follows = component == "code_predictor" and name.split("-")[0] == backend.split("-")[0]
        if name != "mlx" and not follows and not (component == "code_decoder" and name.startswith(("coreml", "onnx"))):
            raise BackendUnavailableError(f"{spec.id} {component}: backend {name!r} is not available "
                                          "(code_decoder: mlx, coreml or onnx; code_predictor: as code_decoder; "
                                          "the rest: mlx)")
    if backend.startswith("onnx"):
        # fail before the model loads: a bad precision, a missing onnxruntime
        from ttscli.backends.onnx import require_onnxruntime
        from ttscli.backends.onnx.graph import Quant
        from ttscli.backends.select import split_backend

        require_onnxruntime()
        quant = Quant(split_backend(backend)[1])
        if options.prefill_mode == "sequential":
            raise UsageError(f"{spec.id} on onnxruntime prefills in one run of its graph; --prefill-mode "
                             "sequential is MLX's (drop it or use --code-decoder-backend mlx)")
        if options.dtype not in (None, "float32") and not options.random_weights:
            raise UsageError(f"{spec.id} on onnxruntime computes the backbone and depth decoder in "
                                          f"float32; drop --dtype {options.dtype}")
    code_decoder = None
    if backend == "coreml":
        # the backbone converted by `ttscli convert breeze-tts-2 --to coreml`, found by its manifest's
        # source hashes before anything else loads (a missing or stale conversion: one CheckpointError line)
        from ttscli.backends.coreml import require_converted
        from ttscli.backends.coreml.decoder import open_code_decoder
        from ttscli.backends.decoder import RowwiseDecoder

        require_converted(spec.id, spec.id, options.random_weights)
        code_decoder = RowwiseDecoder(open_code_decoder(Path(checkpoint), options.coreml_compute_units))
    if options.random_weights:
        dtype = options.dtype or "bfloat16"   # 3.5 B parameters: float32 would not fit most machines
        model = random_model(dtype)
        d = dict(getattr(spec, "defaults", {}) or {})
        gen = GenerationConfig.from_dict({k: v for k, v in d.items() if k != "cfg_scale"})
        a = model.args
        names = ["<|AUDIO|>", "<|audio_eos|>"] + [f"[S{i}]" for i in range(10)] + ["<ins_bos>", "<ins_eos>"]
        tokenizer = ByteTokenizer({n: a.audio_token_id + i for i, n in enumerate(names)}, bos=(2,), byte_offset=1000)
        decoder = build_random_decoder(dtype)
        checkpoint = None
    else:
        checkpoint = Path(checkpoint)
        model, gen = load_model(checkpoint, options.dtype or "float32")
        tokenizer = load_tokenizer(checkpoint, model.args)
        decoder = load_speech_decoder(checkpoint / "audio_tokenizer", options.dtype or "float32")
        check_codec(model.args, decoder.args, checkpoint)
    if backend.startswith("onnx"):
        from ttscli.models.breeze_tts.onnx_decoder import open_decoder
        from ttscli.models.breeze_tts.onnx_export import build_from_model, find_or_build

        folder = build_from_model(model, quant) if checkpoint is None else find_or_build(checkpoint, quant, spec.id)
        code_decoder = open_decoder(folder, model)
    if code_decoder is None:
        code_decoder = MLXCodeDecoder(model, sequential=options.prefill_mode == "sequential")
    pipe = BreezePipeline(spec, model, gen, tokenizer, decoder, code_decoder, checkpoint)
    pipe.backends["code_decoder"] = backend
    if backend.startswith("onnx"):    # onnxruntime runs the backbone and the depth decoder
        pipe.backends.update(code_decoder=f"onnx-{code_decoder.precision}", code_predictor="onnx")
    return pipe
