"""IndexTTS2's semantic GPT on onnxruntime (``--backend code_decoder=onnx[-f32|-int8|-int4]``).

The GPT-2 stack (``gpt.h.*``, ``gpt.ln_f``), then ``final_norm`` and ``mel_head``, as one graph
of the shared decoder-LM export (:mod:`ttscli.backends.onnx.graph`) in its LayerNorm / tanh-GELU
block style without rotary positions: GPT-2's names are mapped onto the export's (``c_attn``'s
fused ``[in, 3 out]`` matrix split into q, k and v, each HF ``Conv1D`` transposed), and a tail of
this family's own applies ``final_norm`` and the code head to the last position. The prompt's
embeddings (conditioning, text and code tables with their learned positions), the sampler, the
beam bookkeeping and the latent pass S2Mel reads stay on MLX; :class:`SemanticGPT` only swaps the
forward and the cache (:class:`OnnxGPT`).

Why: a decode step reads every weight of the 24-layer stack for three beam rows. onnxruntime's
float32 GEMMs read them faster than MLX's on a Linux CPU, and its block-quantized int8 / int4
weights (``MatMulNBits``) read a quarter / an eighth of the bytes, no longer the goldens'
numbers, so they are opt-in by name.

Where the graphs live: built from a checkpoint, in ttscli's cache
(``paths.converted_dir(MODEL, "onnx-<precision>")``) found by the sha256 of gpt.pth (``ttscli
convert indextts2 --to onnx [-q --q-bits 8|4]`` builds them ahead); from random weights, under
a fingerprint of the weights.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from ttscli.backends.blocks import Style
from ttscli.backends.onnx.graph import Builder, Quant
from ttscli.errors import UsageError
from ttscli.lm.config import LMArgs, RopeArgs

FAMILY = "indextts2"
COMPONENT = "code_decoder"
FILE = "gpt.onnx"
SOURCE_FILES = ("gpt.pth",)
GRAPH_LAYOUT = 1
GPT2_BLOCK = Style("layer", "gelu_tanh")
OUTPUTS = ("logits", "final_hidden")


def lm_args(gpt) -> LMArgs:
    """The export's description of ``gpt``'s GPT-2 stack (a :class:`SemanticGPT`)."""
    a = gpt.args.gpt2()
    if a.activation_function not in ("gelu_new", "gelu_pytorch_tanh"):
        raise UsageError(f"the ONNX GPT-2 block computes tanh-GELU, not {a.activation_function!r}; "
                         "use --backend code_decoder=mlx")
    return LMArgs(hidden_size=a.n_embd, num_hidden_layers=a.n_layer, num_attention_heads=a.n_head,
                  intermediate_size=a.inner, rms_norm_eps=a.layer_norm_epsilon, attention_bias=True,
                  mlp_bias=True, rope=RopeArgs(type="none"))


def max_positions(gpt) -> int:
    """The longest prompt + codes one cache holds: conditioning rows, text and code positions."""
    a = gpt.args
    return a.cond_rows + a.text_positions + a.mel_positions


def stack_weights(params: Mapping[str, np.ndarray], layers: int) -> dict[str, np.ndarray]:
    """GPT-2 names (``h.N.*``, ``ln_f.*``; HF ``Conv1D`` weights ``[in, out]``) -> the export's
    (``layers.N.self_attn.q_proj.weight [out, in]`` ...)."""
    from ttscli.backends.coreml.weights import as_float32

    w = {k: as_float32(v) for k, v in params.items()}
    out = {"norm.weight": w["ln_f.weight"], "norm.bias": w["ln_f.bias"]}
    for i in range(layers):
        h, p = f"h.{i}.", f"layers.{i}."
        out[p + "input_layernorm.weight"], out[p + "input_layernorm.bias"] = w[h + "ln_1.weight"], w[h + "ln_1.bias"]
        out[p + "post_attention_layernorm.weight"] = w[h + "ln_2.weight"]
        out[p + "post_attention_layernorm.bias"] = w[h + "ln_2.bias"]
        qkv_w, qkv_b = w[h + "attn.c_attn.weight"].T, w[h + "attn.c_attn.bias"]
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            rows = slice(j * qkv_w.shape[0] // 3, (j + 1) * qkv_w.shape[0] // 3)
            out[f"{p}self_attn.{name}.weight"] = np.ascontiguousarray(qkv_w[rows])
            out[f"{p}self_attn.{name}.bias"] = qkv_b[rows]
        out[p + "self_attn.o_proj.weight"] = np.ascontiguousarray(w[h + "attn.c_proj.weight"].T)
        out[p + "self_attn.o_proj.bias"] = w[h + "attn.c_proj.bias"]
        out[p + "mlp.up_proj.weight"] = np.ascontiguousarray(w[h + "mlp.c_fc.weight"].T)
        out[p + "mlp.up_proj.bias"] = w[h + "mlp.c_fc.bias"]
        out[p + "mlp.down_proj.weight"] = np.ascontiguousarray(w[h + "mlp.c_proj.weight"].T)
        out[p + "mlp.down_proj.bias"] = w[h + "mlp.c_proj.bias"]
    return out


def head_tail(w: Mapping[str, np.ndarray], width: int, eps: float):
    """The graph's tail on the last position's ``ln_f`` state: ``final_norm`` (LayerNorm with a
    bias) -> ``final_hidden``, then ``mel_head`` -> ``logits``."""
    from ttscli.backends.coreml.weights import as_float32

    def tail(b: Builder, hidden: str) -> tuple[list, list]:
        from onnx import TensorProto, helper

        g = b.const("final_norm.weight", as_float32(w["final_norm.weight"]))
        beta = b.const("final_norm.bias", as_float32(w["final_norm.bias"]))
        b.node("LayerNormalization", [hidden, g, beta], ["final_hidden"], epsilon=eps, axis=-1)
        head = as_float32(w["mel_head.weight"])
        b.linear("final_hidden", head, as_float32(w["mel_head.bias"]), "mel_head", out="logits")
        return [], [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", int(head.shape[0])]),
                    helper.make_tensor_value_info("final_hidden", TensorProto.FLOAT, ["batch", width])]

    return tail


def gpt_params(gpt) -> dict:
    """The loaded GPT's tensors an export reads (float32 views): the GPT-2 stack, ``final_norm``
    and ``mel_head``, by their checkpoint names."""
    from ttscli.backends.onnx.convert import mlx_params

    keep = ("gpt.h.", "gpt.ln_f.", "final_norm.", "mel_head.")
    return mlx_params(gpt, lambda k: k.startswith(keep))


def export_gpt_graph(gpt, out_dir: Path, quant: Quant, *, model_id: str, source_record: dict,
                     progress: Callable[..., None] | None = None) -> dict:
    """``gpt.onnx`` (+ ``.data``) and the manifest into ``out_dir`` from the loaded GPT's weights."""
    from ttscli.backends.onnx.export import export_components, export_lm

    def build(folder: Path) -> dict:
        params = gpt_params(gpt)
        args = lm_args(gpt)
        stack = stack_weights({k.removeprefix("gpt."): v for k, v in params.items() if k.startswith("gpt.")},
                              args.num_hidden_layers)
        entry = export_lm(args, stack, folder, FILE, heads={}, max_positions=max_positions(gpt), quant=quant,
                          style=GPT2_BLOCK, tail=head_tail(params, args.hidden_size, float(gpt.final_norm.eps)))
        return {**entry, "heads": ["logits"], "vocab_size": int(params["mel_head.weight"].shape[0])}

    return export_components(out_dir, [(COMPONENT, "the semantic GPT (code decoder)", build)], model_id=model_id,
                             family=FAMILY, precision=quant.precision, source=source_record, layout=GRAPH_LAYOUT,
                             progress=progress)


def convert_onnx(spec, checkpoint: Path, out_dir: Path, *, quantize: bool = False, q_bits: int = 8,
                 q_group_size: int | None = 32, dtype: str | None = None,
                 progress: Callable[..., None] | None = None, **_) -> None:
    """``ttscli convert indextts2 --to onnx [-q --q-bits 8|4]``: the GPT graph of ``checkpoint``."""
    from ttscli.backends.onnx.convert import quant_for
    from ttscli.backends.onnx.export import checkpoint_record
    from ttscli.models.indextts2.config import read_args
    from ttscli.models.indextts2.load import load_unified_voice

    if dtype not in (None, "float32"):
        raise UsageError("ONNX graphs compute in float32 (weights float32, int8 or int4); drop --dtype")
    gpt, _ = load_unified_voice(Path(checkpoint), read_args(Path(checkpoint)), dtype="float32")
    export_gpt_graph(gpt, out_dir, quant_for(quantize, q_bits, q_group_size), model_id=spec.id,
                     source_record=checkpoint_record(checkpoint, SOURCE_FILES), progress=progress)


def find_or_build(gpt, checkpoint: Path | None, quant: Quant, model_id: str | None = None) -> Path:
    """The GPT graph of ``gpt`` at this precision: by the hash of ``checkpoint``'s gpt.pth (the
    file ``gpt`` was loaded from), or, with ``checkpoint`` None, by its weights' fingerprint."""
    from ttscli.backends.onnx.convert import model_graphs

    return model_graphs(lambda: gpt_params(gpt), checkpoint, quant, model_id, family=FAMILY, layout=GRAPH_LAYOUT,
                        source_files=lambda ck: SOURCE_FILES, export=functools.partial(export_gpt_graph, gpt))


def check_options(options) -> None:
    """What the ONNX GPT cannot honour, one line, before anything loads."""
    if options.dtype not in (None, "float32"):
        raise UsageError(f"--dtype {options.dtype}: IndexTTS2's GPT on onnxruntime computes in float32 (weights "
                         "float32, int8 or int4 by the backend name); drop --dtype or use --backend code_decoder=mlx")


class OnnxGPT:
    """The graph in a session, driven as :class:`SemanticGPT` drives its MLX stack: a cache per
    request, ``embeds [B, T, D]`` in, the last position's ``(logits [B, V], hidden [B, D])`` out
    (MLX arrays), and beam rows reordered in place."""

    def __init__(self, folder: Path):
        from ttscli.backends.onnx.manifest import component, read_manifest
        from ttscli.backends.onnx.runtime import OnnxLM

        folder = Path(folder)
        self.lm = OnnxLM(folder, component(read_manifest(folder), COMPONENT, folder))

    def new_cache(self):
        return self.lm.new_cache()

    def __call__(self, embeds, cache):
        import mlx.core as mx

        from ttscli.backends.decoder import to_numpy

        logits, hidden = self.lm.run(to_numpy(embeds), cache, OUTPUTS)
        return mx.array(logits), mx.array(hidden)

    @staticmethod
    def select_rows(cache, rows: list[int]) -> None:
        cache.select_rows(rows)


def attach(gpt, backend: str, checkpoint: Path | None, model_id: str | None = None) -> str:
    """Run ``gpt``'s decoding on onnxruntime from now on; returns the backend's full name
    (``onnx-float32`` etc.). The MLX stack stays for the latent pass S2Mel reads."""
    from ttscli.backends.onnx import require_onnxruntime
    from ttscli.backends.select import split_backend

    require_onnxruntime()
    quant = Quant(split_backend(backend)[1])
    folder = find_or_build(gpt, None if checkpoint is None else Path(checkpoint), quant, model_id)
    gpt.decoder = OnnxGPT(folder)
    return f"onnx-{quant.precision}"
