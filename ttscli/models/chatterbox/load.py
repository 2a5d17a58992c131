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

    from ttscli.models.chatterbox.t3 import T3

    if random_weights:
        from ttscli.nn.init import random_weights as randomize

        return randomize(T3(T3Args()), dtype=dtype)
    from ttscli.quantize import MARKER, prepare

    path = _file(folder, "t3_cfg.safetensors")
    weights = read_safetensors(path)
    marker = t3_marker(path)
    # sizes come from tensors quantizing leaves alone (embeddings) or keeps the row count of
    model = T3(T3Args.from_weights(shapes(weights), str(path)))
    prepare(model, {MARKER: marker} if marker else {}, weights, str(path))
    return load_strict(model, weights, source=str(path), dtype=dtype)


def t3_marker(path: Path) -> dict | None:
    """The quantization marker ttscli convert writes into t3_cfg.safetensors' metadata."""
    import json

    from ttscli.quantize import MARKER

    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n)) if 0 < n < 100_000_000 else {}
    except (OSError, ValueError):
        raise CheckpointError(f"{path}: cannot read") from None
    raw = (header.get("__metadata__") or {}).get(MARKER)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        raise CheckpointError(f"{path}: bad {MARKER} metadata {raw!r}") from None


def load_voice_encoder(folder: Path | None, random_weights: bool = False):

    from ttscli.models.chatterbox.voice_encoder import VoiceEncoder

    if random_weights:
        from ttscli.nn.init import random_weights as randomize

        return randomize(VoiceEncoder(VEArgs()))
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


def load_pipeline(spec, checkpoint: Path | None, options):
    """The engine's load hook: every component from one folder (or random at the real size)."""
    from ttscli.errors import BackendUnavailableError
    from ttscli.models.chatterbox.pipeline import ChatterboxPipeline
    from ttscli.codecs.s3gen import load_s3gen

    from ttscli.backends.select import split_backend

    for component, backend in options.backends.items():
        if backend != "mlx" and not (component == "code_decoder" and split_backend(backend)[0] in ("coreml", "onnx")
                                     or component in ("flow_estimator", "vocoder") and backend == "onnx"):
            raise BackendUnavailableError(f"Chatterbox {component}: backend {backend!r} is not available "
                                          "(code_decoder: mlx, coreml or onnx[-f32|-int8|-int4]; "
                                          "flow_estimator: mlx or onnx; vocoder: mlx or onnx; the rest: mlx)")
    code_backend = options.backend("code_decoder")
    if split_backend(code_backend)[0] == "onnx":     # before anything loads
        from ttscli.models.chatterbox.onnx_decoder import check_options

        check_options(options)
    flow_backend, vocoder_backend = options.backend("flow_estimator"), options.backend("vocoder")
    dtype = options.dtype or "float32"
    rnd = options.random_weights
    t3 = load_t3(checkpoint, dtype=dtype, random_weights=rnd)
    ve = load_voice_encoder(checkpoint, random_weights=rnd)
    if rnd:
        tokenizer = _random_tokenizer()
        conds = _random_conds(t3.args)
    else:
        tokenizer = load_tokenizer(checkpoint)
        conds = load_conds(checkpoint) if (Path(checkpoint) / "conds.pt").exists() else None
    s3gen = load_s3gen(None if rnd else _file(checkpoint, "s3gen.safetensors"), random_weights=rnd)
    if flow_backend == "onnx":
        from ttscli.codecs.s3gen.onnx_flow import attach

        attach(s3gen.flow, None if rnd else Path(checkpoint), getattr(spec, "id", None))
    if vocoder_backend == "onnx":
        from ttscli.codecs.s3gen import onnx_hift

        onnx_hift.attach(s3gen.mel2wav, None if rnd else Path(checkpoint), getattr(spec, "id", None))
    decoder = None
    if split_backend(code_backend)[0] == "onnx":
        from ttscli.models.chatterbox.onnx_decoder import load_decoder

        decoder = load_decoder(code_backend, t3, None if rnd else Path(checkpoint), options, getattr(spec, "id", None))
        code_backend = f"onnx-{decoder.precision}"
    elif code_backend == "coreml":
        # T3 converted by `ttscli convert chatterbox --to coreml`, found by its manifest's source hashes
        from ttscli.backends.coreml import require_converted
        from ttscli.backends.coreml.decoder import open_code_decoder
        from ttscli.models.chatterbox.coreml_export import RowwiseDecoder

        require_converted("Chatterbox", "chatterbox", checkpoint is None)
        decoder = RowwiseDecoder(open_code_decoder(Path(checkpoint), options.coreml_compute_units))
    elif options.prefill_mode == "sequential":
        from ttscli.lm.decoder import MLXCodeDecoder

        decoder = MLXCodeDecoder(t3, sequential=True)
    return ChatterboxPipeline(spec, t3, ve, tokenizer, s3gen, conds, decoder,
                              backends={"code_decoder": code_backend, "speech_decoder": "mlx",
                                        "flow_estimator": flow_backend, "vocoder": vocoder_backend,
                                        "voice_encoder": "mlx"})


class _CharTokenizer:
    """Random-weight runs have no tokenizer.json: one id per character, inside the text vocabulary."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def encode(self, text: str) -> list[int]:
        return [1 + ord(c) % (self.vocab - 1) for c in text]


def _random_tokenizer():
    return _CharTokenizer(T3Args().text_vocab)


def _random_conds(args: T3Args):
    import numpy as np

    from ttscli.models.chatterbox.conds import Conditionals

    rng = np.random.default_rng(0)
    spk = np.abs(rng.standard_normal((1, args.speaker_embed_size))).astype(np.float32)
    T = 100
    gen = {"prompt_token": rng.integers(0, 6561, (1, T)).astype(np.int64),
           "prompt_token_len": np.array([T], np.int64),
           "prompt_feat": rng.standard_normal((1, 2 * T, 80)).astype(np.float32),
           "embedding": rng.standard_normal((1, 192)).astype(np.float32)}
    return Conditionals(spk / np.linalg.norm(spk), rng.integers(0, 6561, (1, args.speech_cond_prompt_len)),
                        0.5, gen)
