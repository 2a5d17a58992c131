"""Pocket TTS's flow LM as Core ML packages (``ttscli convert pocket-tts --to coreml``).

Two packages: ``flow_lm_step.mlpackage``, the transformer one position per call with its KV cache
as Core ML state, built by the shared stateful LM export in Kyutai's block style (its keys are
stored with each head's dimensions even-first, see ttscli.backends.coreml.lm); and
``flow_heads.mlpackage``, stateless, the EOS head and the flow head's single LSD step from
``hidden [1, H]`` and ``noise [1, latent]`` to ``eos_logit [1, 1]`` and ``latent [1, latent]``.
The heads stay apart because the shared step program has no tail; a second call per frame costs
little beside the step. The text table, the latent and voice projections and Mimi stay on MLX.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from .config import FlowLMArgs
from .stack import KYUTAI, flow_lm_weights, lm_args, stack_weights, time_embedding

FAMILY = "pocket_tts"
STEP_FILE, HEADS_FILE = "flow_lm_step.mlpackage", "flow_heads.mlpackage"
SOURCE_FILES = ("model.safetensors",)
# KV positions: a built-in voice, a chunk's text and its frames (upstream's model holds 1000)
CAPACITY = 1024


def heads_program(w: Mapping[str, np.ndarray], a: FlowLMArgs, latent_dim: int):
    """The MIL program of the EOS head and one LSD step of the flow head (upstream's
    SimpleMLPAdaLN at s = 0, t = 1, its time conditioning folded into one constant)."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    from ttscli.backends.coreml.lm import f32, layer_norm

    f, dim = "flow_net.", a.flow_dim
    times = (time_embedding(w, f + "time_embed.0.", 0.0) + time_embedding(w, f + "time_embed.1.", 1.0)) / 2

    def linear(x, key: str, bias_extra=0.0, name: str | None = None):
        kw = {"name": name} if name else {}
        return mb.linear(x=x, weight=f32(w[key + ".weight"]), bias=f32(w[key + ".bias"] + bias_extra), **kw)

    def chunks(x, n: int) -> list:
        return [mb.slice_by_index(x=x, begin=[0, i * dim], end=[1, (i + 1) * dim]) for i in range(n)]

    def modulate(x, shift, scale):
        return mb.add(x=mb.mul(x=x, y=mb.add(x=scale, y=np.float32(1.0))), y=shift)

    specs = [mb.TensorSpec((1, a.d_model), dtype=types.fp32), mb.TensorSpec((1, latent_dim), dtype=types.fp32)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(hidden, noise):
        eos = linear(hidden, "out_eos", name="eos_logit")
        silu_y = mb.silu(x=linear(hidden, f + "cond_embed", times))
        x = linear(noise, f + "input_proj")
        for i in range(a.flow_depth):
            p = f"{f}res_blocks.{i}."
            shift, scale, gate = chunks(linear(silu_y, p + "adaLN_modulation.1"), 3)
            h = modulate(layer_norm(x, w[p + "in_ln.weight"], w[p + "in_ln.bias"], 1e-6, f"res{i}_ln"), shift, scale)
            h = linear(mb.silu(x=linear(h, p + "mlp.0")), p + "mlp.2")
            x = mb.add(x=x, y=mb.mul(x=gate, y=h))
        p = f + "final_layer."
        shift, scale = chunks(linear(silu_y, p + "adaLN_modulation.1"), 2)
        h = modulate(layer_norm(x, np.ones(dim, np.float32), np.zeros(dim, np.float32), 1e-6, "final_ln"),
                     shift, scale)
        return eos, mb.add(x=noise, y=linear(h, p + "linear"), name="latent")

    return prog


def export_flow_lm(source, a: FlowLMArgs, latent_dim: int, out_dir: Path, *, model_id: str, source_record: dict,
                   capacity: int = CAPACITY, weights_8bit: bool = False, precision: str = "float16") -> dict:
    """Both packages and the manifest naming them into ``out_dir``; returns the manifest."""
    from ttscli.backends.coreml.export import convert_program, export_lm, save_package
    from ttscli.backends.coreml.manifest import write_manifest

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    w = flow_lm_weights(source)
    step = export_lm(lm_args(a), stack_weights(w, a), out_dir, STEP_FILE, capacity=capacity,
                     weights_8bit=weights_8bit, precision=precision, style=KYUTAI)
    heads = save_package(convert_program(heads_program(w, a, latent_dim), weights_8bit, precision), out_dir,
                         HEADS_FILE)
    heads.update(kind="flow_heads", latent_dim=latent_dim, flow_steps=1, compute_precision=precision)
    return write_manifest(out_dir, model=model_id, family=FAMILY, components={"flow_lm": step, "flow_heads": heads},
                          source=source_record)


def export_coreml(checkpoint: Path, out_dir: Path, *, model_id: str, capacity: int = CAPACITY,
                  weights_8bit: bool = False, precision: str = "float16") -> dict:
    from ttscli.backends.coreml.manifest import source_files
    from ttscli.backends.coreml.weights import SafeTensors

    from .load import language_dir, read_args

    folder = language_dir(Path(checkpoint))
    args = read_args(folder)
    record = {"checkpoint": str(folder.resolve()), "files": source_files(folder, SOURCE_FILES)}
    return export_flow_lm(SafeTensors(folder / SOURCE_FILES[0]), args.flow_lm, args.latent_dim, out_dir,
                          model_id=model_id, source_record=record, capacity=capacity, weights_8bit=weights_8bit,
                          precision=precision)


def convert_coreml(spec, checkpoint: Path, out_dir: Path, *, capacity: int = CAPACITY, quantize: bool = False,
                   q_bits: int = 8, weights_8bit: bool = False, dtype: str | None = None,
                   progress: Callable[..., None] | None = None, **_unused) -> None:
    """``ttscli convert pocket-tts --to coreml``: the flow LM's step and heads packages."""
    from ttscli.backends.coreml.convert import convert_code_decoder

    convert_code_decoder(export_coreml, spec, checkpoint, out_dir, "flow LM", capacity=capacity, quantize=quantize,
                         q_bits=q_bits, weights_8bit=weights_8bit, dtype=dtype, progress=progress)
