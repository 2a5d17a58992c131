"""Piper ``.onnx`` -> ``model.safetensors`` + ``config.json`` for our MLX VITS.

Initializers keep their PyTorch names where the exporter kept them. The rest are named
through the graph node that consumes them: folded weight-norm convs (``onnx::Conv_8240`` is
the weight of ``/flow/flows.0/enc/in_layers.0/Conv``), the embedding table the exporter called
``sid``, and ``dp.flows.0``'s folded ``exp(-logs)``. Small integer / scalar constants that only
feed shape arithmetic are not weights and are skipped; anything else unnamed is an error.
Hyper-parameters are read from tensor shapes and conv attributes, so other Piper voices
(x_low ... high) convert too.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from ttscli.errors import CheckpointError, UsageError

FORMAT_VERSION = 2      # 2: conv weights in the ONNX (= PyTorch) layout
_TORCH_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[\w]+)+$")
_STRUCTURAL_MAX_ELEMENTS = 64


def _module_path(node_name: str) -> str:
    """``/flow/flows.0/enc/in_layers.0/Conv`` -> ``flow.flows.0.enc.in_layers.0``."""
    return ".".join(node_name.strip("/").split("/")[:-1])


def read_onnx_weights(onnx_path: Path) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """All weights under our names, convs in ONNX's own layout (ttscli.nn.conv's), plus each
    conv's attributes by module path."""
    import onnx
    from onnx import helper, numpy_helper

    try:
        model = onnx.load(str(onnx_path))
    except Exception as err:
        raise CheckpointError(f"cannot read Piper model {onnx_path}: {err}") from err
    graph = model.graph
    consumers: dict[str, list] = {}
    for node in graph.node:
        for pos, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, pos))

    convs: dict[str, dict] = {}
    for node in graph.node:
        if node.op_type in ("Conv", "ConvTranspose"):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            attrs["op"] = node.op_type
            convs[_module_path(node.name)] = attrs

    weights: dict[str, np.ndarray] = {}
    unmapped: list[str] = []
    for init in graph.initializer:
        arr = numpy_helper.to_array(init)
        uses = consumers.get(init.name, [])
        op, pos, node = (uses[0][0].op_type, uses[0][1], uses[0][0]) if uses else (None, None, None)
        if op in ("Conv", "ConvTranspose") and pos in (1, 2):
            name = f"{_module_path(node.name)}.{'weight' if pos == 1 else 'bias'}"
        elif op == "Gather" and pos == 0 and arr.ndim == 2 and arr.dtype.kind == "f":
            name = f"{_module_path(node.name)}.weight"
        elif init.name.endswith("/Exp_output_0") and op == "Mul" and arr.dtype.kind == "f":
            # ElementwiseAffine reverse folded to (x - m) * exp(-logs)
            name = f"{_module_path(node.name)}.logs"
            arr = -np.log(arr)
        elif _TORCH_NAME.match(init.name) and arr.dtype.kind == "f":
            name = init.name
        elif arr.size <= _STRUCTURAL_MAX_ELEMENTS:
            continue          # shape/scalar constant feeding graph arithmetic, not a weight
        else:
            unmapped.append(f"{init.name} {list(arr.shape)}")
            continue
        if name in weights:
            raise CheckpointError(f"{onnx_path.name}: two initializers map to {name}")
        weights[name] = np.ascontiguousarray(arr.astype(np.float32))
    if unmapped:
        raise CheckpointError(f"{onnx_path.name}: initializers with no VITS parameter: {', '.join(unmapped)}")
    return weights, convs


def infer_args(weights: dict[str, np.ndarray], convs: dict[str, dict], voice: dict) -> dict:
    """VITS hyper-parameters from tensor shapes and conv attributes."""
    def count(prefix: str) -> int:
        idx = {int(k[len(prefix):].split(".")[0]) for k in weights if k.startswith(prefix)}
        return max(idx) + 1 if idx else 0

    try:
        emb = weights["enc_p.emb.weight"]
        rel = weights["enc_p.encoder.attn_layers.0.emb_rel_k"]
        hidden = emb.shape[1]
        n_up = count("dec.ups.")
        n_res = count("dec.resblocks.")
        nk = n_res // n_up
        res1 = any(".convs1." in k for k in weights)
        dil_key = "convs1" if res1 else "convs"
        dilations = [[convs[f"dec.resblocks.{r}.{dil_key}.{j}"]["dilations"][0]
                      for j in range(count(f"dec.resblocks.{r}.{dil_key}."))] for r in range(nk)]
        dp_proj = weights["dp.flows.3.proj.weight"] if "dp.flows.3.proj.weight" in weights else \
            next(v for k, v in weights.items() if re.match(r"dp\.flows\.\d+\.proj\.weight", k))
        flow_layers = count("flow.flows.0.enc.in_layers.")
        args = {
            "n_vocab": emb.shape[0],
            "hidden_channels": hidden,
            "inter_channels": weights["enc_p.proj.weight"].shape[0] // 2,
            "filter_channels": weights["enc_p.encoder.ffn_layers.0.conv_1.weight"].shape[0],
            "kernel_size": weights["enc_p.encoder.ffn_layers.0.conv_1.weight"].shape[2],
            "n_layers": count("enc_p.encoder.attn_layers."),
            "window_size": (rel.shape[1] - 1) // 2,
            "n_heads": hidden // rel.shape[2],
            "dp_filter_channels": weights["dp.pre.weight"].shape[0],
            "dp_kernel_size": weights["dp.convs.convs_sep.0.weight"].shape[2],
            "dp_n_flows": count("dp.flows.") // 2,
            "dp_num_bins": (dp_proj.shape[0] + 1) // 3,
            "flow_n_flows": (count("flow.flows.") + 1) // 2,
            "flow_kernel_size": weights["flow.flows.0.enc.in_layers.0.weight"].shape[2],
            "flow_dilation_rate": convs["flow.flows.0.enc.in_layers.1"]["dilations"][0] if flow_layers > 1 else 1,
            "flow_n_layers": flow_layers,
            "resblock": "1" if res1 else "2",
            "resblock_kernel_sizes": [weights[f"dec.resblocks.{r}.{dil_key}.0.weight"].shape[2] for r in range(nk)],
            "resblock_dilation_sizes": dilations,
            "upsample_rates": [convs[f"dec.ups.{i}"]["strides"][0] for i in range(n_up)],
            "upsample_initial_channel": weights["dec.conv_pre.weight"].shape[0],
            "upsample_kernel_sizes": [weights[f"dec.ups.{i}.weight"].shape[2] for i in range(n_up)],
        }
    except (KeyError, IndexError, StopIteration, ZeroDivisionError) as err:
        raise CheckpointError(f"Piper model is not a VITS graph we know: cannot find {err}") from err
    inference = voice.get("inference", {})
    args.update(
        sample_rate=int(voice.get("audio", {}).get("sample_rate", 22050)),
        noise_scale=float(inference.get("noise_scale", 0.667)),
        length_scale=float(inference.get("length_scale", 1.0)),
        noise_w=float(inference.get("noise_w", 0.8)),
    )
    return args


def source_fingerprint(onnx_path: Path) -> dict:
    st = onnx_path.stat()
    return {"name": onnx_path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def convert_onnx(onnx_path: Path, out_dir: Path, progress: Callable[[str], None] | None = None) -> Path:
    """Convert a Piper voice (``X.onnx`` with ``X.onnx.json`` beside it) into ``out_dir``.

    Writes ``model.safetensors`` and ``config.json`` (model args, phoneme map, espeak voice,
    source fingerprint) into a temporary sibling folder first, then renames it into place,
    so an interrupted conversion never leaves a half-written ``out_dir``.
    """
    from safetensors.numpy import save_file

    from .model import ModelArgs, Vits

    onnx_path = Path(onnx_path)
    out_dir = Path(out_dir)
    voice_json = onnx_path.with_name(onnx_path.name + ".json")
    if not onnx_path.is_file():
        raise CheckpointError(f"Piper model not found: {onnx_path}")
    if not voice_json.is_file():
        raise CheckpointError(f"Piper voice config missing: {voice_json} (it ships beside the .onnx)")
    try:
        voice = json.loads(voice_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(f"cannot read {voice_json}: {err}") from err
    if voice.get("phoneme_type", "espeak") != "espeak":
        raise CheckpointError(f"{onnx_path.name}: phoneme_type {voice.get('phoneme_type')!r} "
                              "is not supported (espeak only)")
    if int(voice.get("num_speakers", 1)) > 1:
        raise UsageError(f"{onnx_path.name}: a multi-speaker voice runs on onnxruntime only (--backend vits=onnx); "
                         "ttscli's MLX VITS has no speaker conditioning")

    say = progress or (lambda _msg: None)
    say(f"reading {onnx_path.name}")
    weights, convs = read_onnx_weights(onnx_path)
    args = infer_args(weights, convs, voice)
    say("checking tensors against the VITS model")
    import mlx.core as mx
    Vits(ModelArgs.from_dict(args)).load_weights_strict({k: mx.array(v) for k, v in weights.items()})

    config = {
        "format_version": FORMAT_VERSION,
        "model_type": "vits",
        "args": args,
        "espeak_voice": voice.get("espeak", {}).get("voice", "en-us"),
        "phoneme_type": voice.get("phoneme_type", "espeak"),
        "phoneme_id_map": voice["phoneme_id_map"],
        "source": source_fingerprint(onnx_path),
    }
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        say(f"writing {len(weights)} tensors")
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "mlx"})
        (tmp / "config.json").write_text(json.dumps(config, indent=1, ensure_ascii=False), encoding="utf-8")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)                    # mkdtemp made it private
        for f in tmp.iterdir():
            os.chmod(f, 0o666 & ~umask)
        old = None
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            os.replace(out_dir, old)
        try:
            os.replace(tmp, out_dir)
        except OSError:
            if not out_dir.exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)     # another process finished first
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"wrote {out_dir}")
    return out_dir


def convert_mlx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                q_group_size: int = 64, dtype: str | None = None, progress=None) -> Path:
    """``ttscli convert piper-joe --to mlx -o DIR``: the ONNX initializers as safetensors."""
    from .load import find_onnx

    if quantize:
        raise UsageError("Piper voices are small (63 MB) and run in float32; drop -q")
    if dtype not in (None, "float32"):
        raise UsageError("Piper weights convert to float32 only; drop --dtype")
    steps = iter(range(1, 5))
    say = (lambda msg: progress(next(steps, 4), 4, msg)) if progress else None
    return convert_onnx(find_onnx(checkpoint), Path(out_dir), progress=say)
