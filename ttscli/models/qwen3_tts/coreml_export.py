"""Convert a Qwen3-TTS checkpoint (published Hugging Face layout) to Core ML packages.

Built with coremltools' MIL builder straight from the safetensors (no torch), so it runs on
Linux too; the packages need macOS 15+ to run (Core ML state). Produces, in ``out_dir``:

    talker.mlpackage          stateful, one position per call -> codebook-0 logits + hidden
    code_predictor.mlpackage  stateful (16 slots), one position per call -> logits of one head
    speech_decoder.mlpackage  fixed window of N frames -> N*1920 samples (one-shot clips)
    speech_decoder_stream.mlpackage  stateful, N frames per call, exact streaming decode
    manifest.json             names/shapes/dtypes, capacities, precision, sources' sha256

Embeddings and the text projection are NOT in the packages: prompt building stays with the
MLX model (the hybrid pipeline swaps only the transformer stacks).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Callable


from ttscli.errors import CheckpointError, UsageError

from .coreml_decoder import build_decoder_program
from .coreml_decoder_stream import build_stream_decoder_program
from .coreml_talker import HEADS_GATHER, build_step_program, cache_shape
from .coreml_weights import (  # noqa: F401  (re-exported: tests and bench use them from here)
    REAL_TOKENIZER_CONFIG, SafeTensors, code_predictor_weights, decoder_weights,
    random_sources, read_configs, talker_weights)

MANIFEST = "manifest.json"
FORMAT = "ttscli-coreml-qwen3-tts"
FORMAT_VERSION = 1
TALKER, CODE_PREDICTOR, SPEECH_DECODER = "talker", "code_predictor", "speech_decoder"
SPEECH_DECODER_STREAM = "speech_decoder_stream"
COMPONENTS = (TALKER, CODE_PREDICTOR, SPEECH_DECODER, SPEECH_DECODER_STREAM)

def sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def _dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())


def _feature(f, kind: str) -> dict:
    t = f.type.stateType.arrayType if kind == "state" else f.type.multiArrayType
    from coremltools.proto import FeatureTypes_pb2 as ft
    dtype = ft.ArrayFeatureType.ArrayDataType.Name(t.dataType).lower()
    return {"name": f.name, "shape": [int(s) for s in t.shape], "dtype": dtype}


def describe_spec(spec) -> dict:
    """Inputs, outputs and states as a Core ML spec declares them."""
    d = spec.description
    return {"inputs": [_feature(f, "input") for f in d.input],
            "outputs": [_feature(f, "output") for f in d.output],
            "states": [_feature(f, "state") for f in d.state]}


def _convert(prog, weights_8bit: bool, precision: str = "float16"):
    import coremltools as ct
    import coremltools.optimize.coreml as cto

    if precision not in ("float16", "float32"):
        raise UsageError(f"Core ML compute precision must be float16 or float32, not {precision!r}")
    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.macOS15,
                       compute_precision=ct.precision.FLOAT16 if precision == "float16" else ct.precision.FLOAT32,
                       skip_model_load=True)
    if weights_8bit:
        # Only matrices: linear weights and the code predictor's stacked heads. A global config
        # would also quantize constant tables (RoPE cos/sin, whose all-zero row at position 0
        # has a zero scale), which must stay exact.
        q = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel")
        # Heads [n, vocab, H]: one scale per (head, vocab row), as per-channel for a linear.
        per_row = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_block",
                                              block_size=[1, 1, 0])
        heads = {op.name: per_row for op in model._mil_program.functions["main"].operations
                 if op.op_type == "gather" and op.name.startswith(HEADS_GATHER)}
        cfg = cto.OptimizationConfig(op_type_configs={"linear": q}, op_name_configs=heads)
        model = cto.linear_quantize_weights(model, config=cfg)
    return model


def export_coreml(checkpoint_dir: Path, out_dir: Path, capacity: int = 256, weights_8bit: bool = False,
                  progress: Callable[..., None] | None = None, decoder_frames: int = 100,
                  precision: str = "float16", stream_frames: int = 1,
                  components: tuple[str, ...] = COMPONENTS) -> dict:
    """Build the Core ML packages of a Qwen3-TTS checkpoint into ``out_dir``; returns the manifest.

    ``capacity``: talker KV positions (prompt + generated frames must fit; the runtime raises
    GenerationError past it). ``weights_8bit``: int8 per-channel symmetric weights for the talker
    and code predictor (the speech decoder keeps fp16 weights). ``decoder_frames``: the speech
    decoder's fixed window; ``stream_frames``: frames per call of the streaming decoder.
    ``precision``: compute precision, float16 (default; what the Neural
    Engine runs) or float32 (GPU/CPU; for parity checks). ``progress(done, total, what)`` is
    called after each step.
    """
    checkpoint_dir = Path(checkpoint_dir)
    cfg, tok_cfg = read_configs(checkpoint_dir)
    sources = (lambda: SafeTensors(checkpoint_dir / "model.safetensors"),
               lambda: SafeTensors(checkpoint_dir / "speech_tokenizer" / "model.safetensors"))
    manifest = export_from_sources(cfg, tok_cfg, sources, out_dir, capacity=capacity, weights_8bit=weights_8bit,
                                   progress=progress, decoder_frames=decoder_frames, precision=precision,
                                   stream_frames=stream_frames, components=components,
                                   source_name=str(checkpoint_dir))
    hashes = {}
    for rel in ("model.safetensors", "speech_tokenizer/model.safetensors"):
        hashes[rel] = sha256(checkpoint_dir / rel)
    manifest["source"]["sha256"] = hashes
    (Path(out_dir) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def export_random(preset: str, out_dir: Path, seed: int = 0, **kw) -> dict:
    """Packages at the real dimensions of ``preset`` (see ``config.preset_config``) with random
    weights, e.g. to measure build time or on-device speed without a download."""
    from .config import preset_config

    cfg = preset_config(preset)
    tok_cfg = REAL_TOKENIZER_CONFIG
    model_src, tok_src = random_sources(cfg, tok_cfg, seed)
    return export_from_sources(cfg, tok_cfg, (lambda: model_src, lambda: tok_src), out_dir,
                               source_name=f"random weights ({preset}, seed {seed})", **kw)


def export_from_sources(cfg: dict, tok_cfg: dict, sources, out_dir: Path, capacity: int = 256,
                        weights_8bit: bool = False, progress: Callable[..., None] | None = None,
                        decoder_frames: int = 100, precision: str = "float16", stream_frames: int = 1,
                        components: tuple[str, ...] = COMPONENTS, source_name: str = "") -> dict:
    """export_coreml from weight sources: ``sources`` = (model thunk, speech-tokenizer thunk),
    each returning an object with ``keys() / shape(key) / get(key) / in``."""
    import coremltools as ct

    import ttscli

    if capacity < 2 or decoder_frames < 1 or stream_frames < 1:
        raise UsageError(f"capacity ({capacity}) must be >= 2, decoder_frames ({decoder_frames}) and "
                         f"stream_frames ({stream_frames}) >= 1")
    unknown = set(components) - set(COMPONENTS)
    if unknown:
        raise UsageError(f"unknown Core ML components {sorted(unknown)}")
    if "talker_config" not in cfg or "code_predictor_config" not in cfg["talker_config"]:
        raise CheckpointError("config.json has no talker_config/code_predictor_config; is this Qwen3-TTS?")
    if "decoder_config" not in tok_cfg:
        raise CheckpointError("speech_tokenizer/config.json has no decoder_config")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    total = len(components)
    say = progress or (lambda done, total, what="": None)
    weight_desc = "int8-linear-symmetric-per-channel" if weights_8bit else "float16"
    tc = cfg["talker_config"]
    cc = tc["code_predictor_config"]
    packages: dict[str, dict] = {}

    def save(name: str, prog, quantize: bool, extra: dict):
        t0 = time.perf_counter()
        model = _convert(prog, quantize, precision)
        path = out_dir / f"{name}.mlpackage"
        if path.exists():
            shutil.rmtree(path)
        model.save(str(path))
        packages[name] = {"path": path.name, "compute_precision": precision,
                          "weights": weight_desc if quantize else "float16",
                          **describe_spec(model.get_spec()), **extra, "size_bytes": _dir_size(path),
                          "build_seconds": round(time.perf_counter() - t0, 2)}
        say(len(packages), total, f"Core ML: {name} done")

    model_src = sources[0]() if {TALKER, CODE_PREDICTOR} & set(components) else None
    if TALKER in components:
        say(len(packages), total, "Core ML: talker")
        dims, w, head = talker_weights(model_src, cfg)
        prog = build_step_program(w, dims, capacity, dims.hidden_size, head)
        del w
        save(TALKER, prog, weights_8bit,
             {"kind": "stateful_step", "capacity": capacity, "hidden_size": dims.hidden_size,
              "vocab_size": int(head.shape[0]), "num_layers": dims.num_layers,
              "cache_shape": list(cache_shape(dims, capacity))})
        del prog
    if CODE_PREDICTOR in components:
        say(len(packages), total, "Core ML: code predictor")
        dims, w, heads, proj = code_predictor_weights(model_src, cfg)
        slots = cc["num_code_groups"]
        prog = build_step_program(w, dims, slots, tc["hidden_size"], heads, in_proj=proj)
        del w
        save(CODE_PREDICTOR, prog, weights_8bit,
             {"kind": "stateful_step", "capacity": slots, "hidden_size": dims.hidden_size,
              "input_size": tc["hidden_size"], "vocab_size": int(heads.shape[1]),
              "num_heads": int(heads.shape[0]), "num_layers": dims.num_layers,
              "cache_shape": list(cache_shape(dims, slots))})
        del prog
    if SPEECH_DECODER in components:
        say(len(packages), total, "Core ML: speech decoder")
        dims, w = decoder_weights(sources[1](), tok_cfg)
        prog = build_decoder_program(w, dims, decoder_frames)
        del w
        save(SPEECH_DECODER, prog, False,
             {"kind": "fixed_window", "frames": decoder_frames, "num_quantizers": dims.num_quantizers,
              "samples_per_frame": dims.samples_per_frame,
              "sample_rate": int(tok_cfg.get("output_sample_rate", 24000))})

    if SPEECH_DECODER_STREAM in components:
        say(len(packages), total, "Core ML: streaming speech decoder")
        dims, w = decoder_weights(sources[1](), tok_cfg)
        prog, states = build_stream_decoder_program(w, dims, stream_frames)
        del w
        save(SPEECH_DECODER_STREAM, prog, False,
             {"kind": "stateful_stream", "frames": stream_frames, "num_quantizers": dims.num_quantizers,
              "samples_per_frame": dims.samples_per_frame, "sliding_window": dims.sliding_window,
              "sample_rate": int(tok_cfg.get("output_sample_rate", 24000))})

    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "ttscli_version": ttscli.__version__, "coremltools_version": ct.__version__,
        "minimum_deployment_target": "macOS15",
        "source": {"checkpoint": source_name, "sha256": {},
                   "tts_model_type": cfg.get("tts_model_type"), "tts_model_size": cfg.get("tts_model_size")},
        "packages": packages,
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def convert_coreml(spec, checkpoint: Path, out_dir: Path, *, capacity: int = 256, weights_8bit: bool = False,
                   progress: Callable[..., None] | None = None) -> None:
    """The family hook ``ttscli convert MODEL --to coreml`` calls (see ttscli/convert.py)."""
    export_coreml(checkpoint, out_dir, capacity=capacity, weights_8bit=weights_8bit, progress=progress)


def read_manifest(out_dir: Path) -> dict:
    p = Path(out_dir) / MANIFEST
    try:
        m = json.loads(p.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{p} is missing; run `ttscli convert MODEL --to coreml` first") from None
    if m.get("format") != FORMAT or m.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{p} is not a {FORMAT} v{FORMAT_VERSION} manifest; convert again")
    return m
