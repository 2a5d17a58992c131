"""Checkpoint tensors for the Core ML export, read with numpy (no torch, no MLX).

:class:`SafeTensors` memory-maps a published .safetensors file (bf16 included); the ``*_weights``
functions take exactly the tensors one package needs, checking names and shapes;
:func:`random_sources` stands in for a checkpoint at real dimensions with random values.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ttscli.errors import CheckpointError

from .coreml_decoder import DecoderDims
from .coreml_talker import LMDims

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
