"""Pocket TTS's configuration: the sections of upstream's config yaml
(pocket_tts/config/english.yaml, read by pocket_tts/utils/config.py) that the model reads.

The published weights (``languages/<lang>/model.safetensors``) ship without a config: the package
holds it. Defaults here are english.yaml's, the model ``pocket-tts`` names; a folder may carry a
``config.json`` with the same sections (``flow_lm``, ``mimi`` and the top-level generation
fields) for other sizes, as the tiny test checkpoint does. Settings this implementation does not
run (another flow head, a z projection, low-rank text tables, grouped or narrowed attention) are
refused with the field named.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ttscli.codecs.mimi import MimiArgs
from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError


@dataclass
class FlowLMArgs(BaseArgs):
    """``flow_lm``: the causal transformer, its text table and the flow head."""

    d_model: int = 1024
    num_heads: int = 16
    num_layers: int = 6
    hidden_scale: int = 4
    dim_feedforward: int | None = None
    max_period: float = 10000.0
    flow_dim: int = 512
    flow_depth: int = 6
    n_bins: int = 4000
    insert_bos_before_voice: bool = True

    @property
    def feedforward(self) -> int:
        return self.dim_feedforward or self.d_model * self.hidden_scale

    @classmethod
    def from_upstream(cls, section: dict[str, Any], where: str) -> "FlowLMArgs":
        flow, tr, lut = section.get("flow", {}), section.get("transformer", {}), section.get("lookup_table", {})
        refused = {"flow.type": flow.get("type", "lsd") != "lsd", "z_dim": section.get("z_dim") is not None,
                   "lookup_table.rank": lut.get("rank") is not None,
                   "transformer.attn_dim": tr.get("attn_dim") not in (None, tr.get("d_model")),
                   "transformer.num_kv_heads": tr.get("num_kv_heads") not in (None, tr.get("num_heads"))}
        for name, bad in refused.items():
            if bad:
                raise CheckpointError(f"{where}: flow_lm.{name} is not supported by this implementation")
        kw = {k: tr[k] for k in ("d_model", "num_heads", "num_layers", "hidden_scale", "dim_feedforward",
                                 "max_period") if k in tr}
        kw.update({"flow_dim": flow.get("dim", cls.flow_dim), "flow_depth": flow.get("depth", cls.flow_depth),
                   "n_bins": lut.get("n_bins", cls.n_bins),
                   "insert_bos_before_voice": section.get("insert_bos_before_voice", False)})
        return cls.from_dict(kw, source=where)


def mimi_args(section: dict[str, Any] | None = None, where: str = "config") -> MimiArgs:
    """upstream's ``mimi`` section as MimiArgs (english.yaml's values by default)."""
    s = section or {}
    sean, tr, q = s.get("seanet", {}), s.get("transformer", {}), s.get("quantizer", {})
    if s.get("decoder_seanet") or s.get("decoder_transformer"):
        raise CheckpointError(f"{where}: mimi.decoder_seanet / decoder_transformer are not supported")
    if s.get("channels", 1) != 1:
        raise CheckpointError(f"{where}: mimi.channels must be 1")
    dim = sean.get("dimension", 512)
    if tr.get("d_model", dim) != dim or tr.get("input_dimension", dim) != dim or \
            list(tr.get("output_dimensions", [dim])) != [dim] or q.get("output_dimension", dim) != dim or \
            s.get("outer_dim", dim) != dim:
        raise CheckpointError(f"{where}: mimi widths must all equal seanet.dimension ({dim}) here")
    return MimiArgs.from_dict({
        "sampling_rate": s.get("sample_rate", 24000), "hidden_size": dim,
        "num_filters": sean.get("n_filters", 64), "num_residual_layers": sean.get("n_residual_layers", 1),
        "upsampling_ratios": list(sean.get("ratios", [6, 5, 4])), "kernel_size": sean.get("kernel_size", 7),
        "last_kernel_size": sean.get("last_kernel_size", 3),
        "residual_kernel_size": sean.get("residual_kernel_size", 3),
        "dilation_growth_rate": sean.get("dilation_base", 2), "pad_mode": sean.get("pad_mode", "constant"),
        "compress": sean.get("compress", 2), "num_hidden_layers": tr.get("num_layers", 2),
        "intermediate_size": tr.get("dim_feedforward", 2048), "num_attention_heads": tr.get("num_heads", 8),
        "num_key_value_heads": tr.get("num_heads", 8), "hidden_act": "gelu_pytorch_tanh", "norm_eps": 1e-5,
        "rope_theta": float(tr.get("max_period", 10000.0)), "_frame_rate": s.get("frame_rate", 12.5),
        "attention_window": tr.get("context", 250),
        "latent_dim": s.get("inner_dim") or q.get("dimension", 32),
    }, source=where)


@dataclass
class ModelArgs:
    """The whole model and upstream's generation defaults (pocket_tts/default_parameters.py and
    the config's top-level fields)."""

    flow_lm: FlowLMArgs = field(default_factory=FlowLMArgs)
    mimi: MimiArgs = field(default_factory=mimi_args)
    temperature: float = 0.3
    eos_threshold: float = -4.0
    frames_after_eos: int | None = None
    pad_with_spaces_for_short_inputs: bool = False
    remove_semicolons: bool = False
    append_terminal_punctuation: bool = True
    capitalize_first_letter: bool = True
    replace_characters: dict[str, str] = field(default_factory=lambda: {"\u2019": "'", "\u2018": "'"})

    @property
    def latent_dim(self) -> int:
        return self.mimi.latent_dim

    @classmethod
    def from_upstream(cls, config: dict[str, Any], where: str) -> "ModelArgs":
        """From a dict in upstream's config layout (its yaml as JSON)."""
        if "flow_lm" not in config or "mimi" not in config:
            raise CheckpointError(f"{where}: needs the flow_lm and mimi sections of upstream's config")
        args = cls(flow_lm=FlowLMArgs.from_upstream(config["flow_lm"], where), mimi=mimi_args(config["mimi"], where))
        args.temperature = float(config.get("default_temperature", args.temperature))
        args.eos_threshold = float(config.get("default_eos_threshold", args.eos_threshold))
        args.frames_after_eos = config.get("model_recommended_frames_after_eos")
        for name in ("pad_with_spaces_for_short_inputs", "remove_semicolons", "append_terminal_punctuation",
                     "capitalize_first_letter"):
            setattr(args, name, bool(config.get(name, getattr(args, name))))
        args.replace_characters = dict(config.get("replace_characters", {}))
        return args
