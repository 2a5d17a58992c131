"""Convert a Qwen3-TTS checkpoint (published Hugging Face layout) to Core ML packages.

Built with coremltools' MIL builder straight from the safetensors (no torch), so it runs on
Linux too; the packages need macOS 15+ to run (Core ML state). Produces, in ``out_dir``:

    talker.mlpackage          stateful, one position per call -> codebook-0 logits + hidden
    code_predictor.mlpackage  stateful (16 slots), one position per call -> logits of one head
    speech_decoder.mlpackage  fixed window of N frames -> N*1920 samples
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

import numpy as np

from ttscli.errors import CheckpointError, UsageError

from .coreml_decoder import DecoderDims, build_decoder_program
from .coreml_talker import HEADS_GATHER, LMDims, build_step_program, cache_shape

MANIFEST = "manifest.json"
FORMAT = "ttscli-coreml-qwen3-tts"
FORMAT_VERSION = 1
TALKER, CODE_PREDICTOR, SPEECH_DECODER = "talker", "code_predictor", "speech_decoder"

_DTYPES = {"BF16": None, "F16": np.float16, "F32": np.float32, "F64": np.float64,
           "I64": np.int64, "I32": np.int32}


class SafeTensors:
    """Lazy numpy reader of one .safetensors file (bf16 included), memory-mapped."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise CheckpointError(f"{self.path} is missing; point at a Qwen3-TTS checkpoint folder")
        with open(self.path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        header.pop("__metadata__", None)
        self._header = header
        self._base = 8 + n
        self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")

    def keys(self):
        return self._header.keys()

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._header[key]["shape"])

    def __contains__(self, key: str) -> bool:
        return key in self._header

    def get(self, key: str) -> np.ndarray:
        """The tensor as float32 (floats) or its integer dtype."""
        info = self._header[key]
        start, end = info["data_offsets"]
        raw = self._mm[self._base + start:self._base + end]
        dt = info["dtype"]
        if dt == "BF16":
            arr = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif dt in _DTYPES:
            arr = raw.view(_DTYPES[dt]).astype(np.float32 if dt.startswith("F") else _DTYPES[dt])
        else:
            raise CheckpointError(f"{self.path.name}: tensor {key} has unsupported dtype {dt}")
        return arr.reshape(info["shape"])


def _take(st: SafeTensors, prefix: str, expected: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Tensors ``prefix + name`` with the expected shapes; names them if missing or mis-shaped."""
    missing = [prefix + k for k in expected if prefix + k not in st]
    if missing:
        raise CheckpointError(f"{st.path.name}: missing tensors {', '.join(missing[:5])}"
                              + (f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""))
    bad = [f"{prefix + k} {st.shape(prefix + k)} (expected {shape})"
           for k, shape in expected.items() if st.shape(prefix + k) != tuple(shape)]
    if bad:
        raise CheckpointError(f"{st.path.name}: mis-shaped tensors: {'; '.join(bad[:5])}")
    return {k: st.get(prefix + k) for k in expected}


def _lm_dims(c: dict) -> LMDims:
    try:
        return LMDims(hidden_size=c["hidden_size"], num_layers=c["num_hidden_layers"],
                      num_heads=c["num_attention_heads"], num_kv_heads=c["num_key_value_heads"],
                      head_dim=c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
                      rms_norm_eps=float(c["rms_norm_eps"]), rope_theta=float(c["rope_theta"]))
    except KeyError as e:
        raise CheckpointError(f"config.json: talker/code predictor config lacks {e}") from None


def _lm_layer_shapes(d: LMDims, intermediate: int) -> dict[str, tuple[int, ...]]:
    h, hd = d.hidden_size, d.head_dim
    out = {"norm.weight": (h,)}
    for i in range(d.num_layers):
        p = f"layers.{i}."
        out.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (d.num_heads * hd, h),
            p + "self_attn.k_proj.weight": (d.num_kv_heads * hd, h),
            p + "self_attn.v_proj.weight": (d.num_kv_heads * hd, h),
            p + "self_attn.o_proj.weight": (h, d.num_heads * hd),
            p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
            p + "mlp.gate_proj.weight": (intermediate, h), p + "mlp.up_proj.weight": (intermediate, h),
            p + "mlp.down_proj.weight": (h, intermediate),
        })
    return out


def _decoder_shapes(d: DecoderDims) -> dict[str, tuple[int, ...]]:
    half, lat, hid = d.codebook_dim // 2, d.latent_dim, d.hidden_size
    inner = d.num_heads * d.head_dim
    s = {"quantizer.rvq_first.output_proj.weight": (d.codebook_dim, half, 1),
         "quantizer.rvq_rest.output_proj.weight": (d.codebook_dim, half, 1),
         "pre_conv.conv.weight": (lat, d.codebook_dim, 3), "pre_conv.conv.bias": (lat,),
         "pre_transformer.input_proj.weight": (hid, lat), "pre_transformer.input_proj.bias": (hid,),
         "pre_transformer.output_proj.weight": (lat, hid), "pre_transformer.output_proj.bias": (lat,),
         "pre_transformer.norm.weight": (hid,)}
    books = ["quantizer.rvq_first.vq.layers.0."]
    books += [f"quantizer.rvq_rest.vq.layers.{i}." for i in range(d.num_quantizers - 1)]
    for b in books:
        s[b + "_codebook.cluster_usage"] = (d.codebook_size,)
        s[b + "_codebook.embedding_sum"] = (d.codebook_size, half)
    for n in range(d.num_layers):
        p = f"pre_transformer.layers.{n}."
        s.update({p + "self_attn.q_proj.weight": (inner, hid), p + "self_attn.k_proj.weight": (inner, hid),
                  p + "self_attn.v_proj.weight": (inner, hid), p + "self_attn.o_proj.weight": (hid, inner),
                  p + "input_layernorm.weight": (hid,), p + "post_attention_layernorm.weight": (hid,),
                  p + "self_attn_layer_scale.scale": (hid,), p + "mlp_layer_scale.scale": (hid,),
                  p + "mlp.gate_proj.weight": (d.intermediate_size, hid),
                  p + "mlp.up_proj.weight": (d.intermediate_size, hid),
                  p + "mlp.down_proj.weight": (hid, d.intermediate_size)})
    for i in range(len(d.upsampling_ratios)):
        f = d.upsampling_ratios[i]
        p = f"upsample.{i}."
        s.update({p + "0.conv.weight": (lat, lat, f), p + "0.conv.bias": (lat,),
                  p + "1.dwconv.conv.weight": (lat, 1, 7), p + "1.dwconv.conv.bias": (lat,),
                  p + "1.norm.weight": (lat,), p + "1.norm.bias": (lat,),
                  p + "1.pwconv1.weight": (4 * lat, lat), p + "1.pwconv1.bias": (4 * lat,),
                  p + "1.pwconv2.weight": (lat, 4 * lat), p + "1.pwconv2.bias": (lat,),
                  p + "1.gamma": (lat,)})
    s["decoder.0.conv.weight"] = (d.decoder_dim, lat, 7)
    s["decoder.0.conv.bias"] = (d.decoder_dim,)
    for b, r in enumerate(d.upsample_rates, start=1):
        cin, cout = d.decoder_dim // 2 ** (b - 1), d.decoder_dim // 2 ** b
        p = f"decoder.{b}.block."
        s.update({p + "0.alpha": (cin,), p + "0.beta": (cin,),
                  p + "1.conv.weight": (cin, cout, 2 * r), p + "1.conv.bias": (cout,)})
        for u in (2, 3, 4):
            s.update({f"{p}{u}.act1.alpha": (cout,), f"{p}{u}.act1.beta": (cout,),
                      f"{p}{u}.act2.alpha": (cout,), f"{p}{u}.act2.beta": (cout,),
                      f"{p}{u}.conv1.conv.weight": (cout, cout, 7), f"{p}{u}.conv1.conv.bias": (cout,),
                      f"{p}{u}.conv2.conv.weight": (cout, cout, 1), f"{p}{u}.conv2.conv.bias": (cout,)})
    n = len(d.upsample_rates) + 1
    last = d.decoder_dim // 2 ** len(d.upsample_rates)
    s.update({f"decoder.{n}.alpha": (last,), f"decoder.{n}.beta": (last,),
              f"decoder.{n + 1}.conv.weight": (1, last, 7), f"decoder.{n + 1}.conv.bias": (1,)})
    return s


def read_configs(checkpoint_dir: Path) -> tuple[dict, dict]:
    """(config.json, speech_tokenizer/config.json) of a checkpoint folder."""
    out = []
    for rel in ("config.json", "speech_tokenizer/config.json"):
        p = Path(checkpoint_dir) / rel
        try:
            out.append(json.loads(p.read_text()))
        except FileNotFoundError:
            raise CheckpointError(f"{p} is missing; point at a Qwen3-TTS checkpoint folder") from None
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{p} is not valid JSON ({e})") from None
    return out[0], out[1]


def talker_weights(st, cfg: dict):
    """(dims, stack tensors, codec_head) of the talker from ``st`` (model.safetensors), shape-checked."""
    tc = cfg["talker_config"]
    dims = _lm_dims(tc)
    w = _take(st, "talker.model.", _lm_layer_shapes(dims, tc["intermediate_size"]))
    head = _take(st, "talker.", {"codec_head.weight": (tc["vocab_size"], dims.hidden_size)})
    return dims, w, head["codec_head.weight"]


def code_predictor_weights(st, cfg: dict):
    """(dims, stack tensors, heads [n, vocab, H], optional in-projection) of the code predictor."""
    tc, cc = cfg["talker_config"], cfg["talker_config"]["code_predictor_config"]
    dims = _lm_dims(cc)
    w = _take(st, "talker.code_predictor.model.", _lm_layer_shapes(dims, cc["intermediate_size"]))
    n = cc["num_code_groups"] - 1
    heads = _take(st, "talker.code_predictor.", {f"lm_head.{i}.weight": (cc["vocab_size"], dims.hidden_size)
                                                 for i in range(n)})
    heads = np.stack([heads[f"lm_head.{i}.weight"] for i in range(n)])
    proj = None
    if tc["hidden_size"] != dims.hidden_size:
        p = _take(st, "talker.code_predictor.small_to_mtp_projection.",
                  {"weight": (dims.hidden_size, tc["hidden_size"]), "bias": (dims.hidden_size,)})
        proj = (p["weight"], p["bias"])
    return dims, w, heads, proj


def decoder_weights(st, tok_cfg: dict):
    """(dims, decoder tensors without the ``decoder.`` prefix) from ``st`` (speech_tokenizer/model.safetensors)."""
    dims = DecoderDims.from_config(tok_cfg["decoder_config"])
    return dims, _take(st, "decoder.", _decoder_shapes(dims))


class RandomWeights:
    """A weight source with the checkpoint's names and shapes and random values (bench/build-time
    measurements at real dimensions without downloading anything)."""

    def __init__(self, shapes: dict[str, tuple[int, ...]], seed: int = 0, path: str = "random weights"):
        self._shapes = dict(shapes)
        self._seed = seed
        self.path = Path(path)

    def __contains__(self, key: str) -> bool:
        return key in self._shapes

    def keys(self):
        return self._shapes.keys()

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self._shapes[key])

    def get(self, key: str) -> np.ndarray:
        shape = self._shapes[key]
        rng = np.random.default_rng([self._seed, int(hashlib.md5(key.encode()).hexdigest()[:8], 16)])
        leaf = key.rsplit(".", 1)[-1]
        if "cluster_usage" in key:
            return rng.uniform(0.5, 2.0, shape).astype(np.float32)
        if len(shape) == 1:
            if leaf in ("alpha", "beta", "bias"):
                return (0.05 * rng.standard_normal(shape)).astype(np.float32)
            return (1.0 + 0.05 * rng.standard_normal(shape)).astype(np.float32)
        fan_in = int(np.prod(shape[1:]))
        return (rng.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in)).astype(np.float32)


def random_sources(cfg: dict, tok_cfg: dict, seed: int = 0) -> tuple[RandomWeights, RandomWeights]:
    """(model source, speech-tokenizer source) with every tensor the export reads, at the
    dimensions of ``cfg`` / ``tok_cfg`` (e.g. ``config.preset_config("0.6B-Base")``)."""
    tc = cfg["talker_config"]
    cc = tc["code_predictor_config"]
    td, cd = _lm_dims(tc), _lm_dims(cc)
    shapes = {"talker.model." + k: v for k, v in _lm_layer_shapes(td, tc["intermediate_size"]).items()}
    shapes["talker.codec_head.weight"] = (tc["vocab_size"], td.hidden_size)
    shapes.update({"talker.code_predictor.model." + k: v
                   for k, v in _lm_layer_shapes(cd, cc["intermediate_size"]).items()})
    for i in range(cc["num_code_groups"] - 1):
        shapes[f"talker.code_predictor.lm_head.{i}.weight"] = (cc["vocab_size"], cd.hidden_size)
    if td.hidden_size != cd.hidden_size:
        shapes["talker.code_predictor.small_to_mtp_projection.weight"] = (cd.hidden_size, td.hidden_size)
        shapes["talker.code_predictor.small_to_mtp_projection.bias"] = (cd.hidden_size,)
    dd = DecoderDims.from_config(tok_cfg["decoder_config"])
    dec = {"decoder." + k: v for k, v in _decoder_shapes(dd).items()}
    return RandomWeights(shapes, seed, "model.safetensors"), RandomWeights(dec, seed + 1, "speech_tokenizer")


# Decoder section of the published speech_tokenizer/config.json (Qwen3-TTS-Tokenizer-12Hz).
REAL_TOKENIZER_CONFIG = {
    "output_sample_rate": 24000,
    "decoder_config": {
        "latent_dim": 1024, "codebook_dim": 512, "codebook_size": 2048, "decoder_dim": 1536,
        "hidden_size": 512, "intermediate_size": 1024, "head_dim": 64, "num_attention_heads": 16,
        "num_hidden_layers": 8, "num_key_value_heads": 16, "num_quantizers": 16, "rms_norm_eps": 1e-5,
        "rope_theta": 10000, "sliding_window": 72, "upsample_rates": [8, 5, 4, 3], "upsampling_ratios": [2, 2]},
}


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
                  precision: str = "float16",
                  components: tuple[str, ...] = (TALKER, CODE_PREDICTOR, SPEECH_DECODER)) -> dict:
    """Build the Core ML packages of a Qwen3-TTS checkpoint into ``out_dir``; returns the manifest.

    ``capacity``: talker KV positions (prompt + generated frames must fit; the runtime raises
    GenerationError past it). ``weights_8bit``: int8 per-channel symmetric weights for the talker
    and code predictor (the speech decoder keeps fp16 weights). ``decoder_frames``: the speech
    decoder's fixed window. ``precision``: compute precision, float16 (default; what the Neural
    Engine runs) or float32 (GPU/CPU; for parity checks). ``progress(done, total, what)`` is
    called after each step.
    """
    checkpoint_dir = Path(checkpoint_dir)
    cfg, tok_cfg = read_configs(checkpoint_dir)
    sources = (lambda: SafeTensors(checkpoint_dir / "model.safetensors"),
               lambda: SafeTensors(checkpoint_dir / "speech_tokenizer" / "model.safetensors"))
    manifest = export_from_sources(cfg, tok_cfg, sources, out_dir, capacity=capacity, weights_8bit=weights_8bit,
                                   progress=progress, decoder_frames=decoder_frames, precision=precision,
                                   components=components, source_name=str(checkpoint_dir))
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
                        decoder_frames: int = 100, precision: str = "float16",
                        components: tuple[str, ...] = (TALKER, CODE_PREDICTOR, SPEECH_DECODER),
                        source_name: str = "") -> dict:
    """export_coreml from weight sources: ``sources`` = (model thunk, speech-tokenizer thunk),
    each returning an object with ``keys() / shape(key) / get(key) / in``."""
    import coremltools as ct

    import ttscli

    if capacity < 2 or decoder_frames < 1:
        raise UsageError(f"capacity ({capacity}) must be >= 2 and decoder_frames ({decoder_frames}) >= 1")
    unknown = set(components) - {TALKER, CODE_PREDICTOR, SPEECH_DECODER}
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
