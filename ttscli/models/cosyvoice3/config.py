"""Arguments of a Fun-CosyVoice3 folder: ``cosyvoice3.yaml`` (upstream's hyperpyyaml, read here as
plain YAML: the ``!new:`` / ``!name:`` tags only name upstream classes, their mappings hold the
sizes) and ``CosyVoice-BlankEN/config.json`` (the Qwen2 LM)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscli.codecs.s3gen.dit import DiTFlowArgs
from ttscli.codecs.s3gen.hift import HiFTArgs
from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs

# Qwen2.5-0.5B, the LM of the published checkpoint (CosyVoice-BlankEN/config.json)
QWEN2_05B = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
             "rope_theta": 1000000.0, "vocab_size": 151936, "max_position_embeddings": 32768}


@dataclass
class SamplingArgs:
    """Upstream's ``ras_sampling`` settings (repetition-aware nucleus sampling)."""
    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1


@dataclass
class CosyVoice3Args:
    lm: LMArgs = field(default_factory=lambda: LMArgs.from_hf(QWEN2_05B))
    speech_token_size: int = 6561
    sampling: SamplingArgs = field(default_factory=SamplingArgs)
    flow: DiTFlowArgs = field(default_factory=DiTFlowArgs)
    hift: HiFTArgs = field(default_factory=HiFTArgs)
    sample_rate: int = 24000
    token_frame_rate: int = 25
    chunk_size: int = 25            # streaming: tokens per flow chunk (the DiT's static chunk / 2)


def _tagged_yaml(text: str, source: str) -> dict:
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def any_tag(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", any_tag)
    try:
        return yaml.load(text, Loader=Loader) or {}
    except yaml.YAMLError as e:
        raise CheckpointError(f"{source}: not readable YAML ({e})") from None


def _ref(value: Any, top: dict) -> int:
    """A size that may be ``!ref <name>`` or a product of them (``<chunk_size> * <token_mel_ratio>``)."""
    out = 1
    for factor in str(value).split("*"):
        factor = factor.strip()
        if factor.startswith("<") and factor.endswith(">"):
            factor = top[factor[1:-1]]
        out *= int(factor)
    return out


def read_args(folder: Path) -> CosyVoice3Args:
    """The sizes a Fun-CosyVoice3 folder was built with; a missing section is a CheckpointError."""
    folder = Path(folder)
    path = folder / "cosyvoice3.yaml"
    if not path.is_file():
        raise CheckpointError(f"{folder}: no cosyvoice3.yaml (a Fun-CosyVoice3 folder holds cosyvoice3.yaml, "
                              "llm.pt, flow.pt, hift.pt, campplus.onnx, speech_tokenizer_v3.onnx, CosyVoice-BlankEN/)")
    top = _tagged_yaml(path.read_text(), str(path))
    try:
        llm, flow, hift = top["llm"], top["flow"], top["hift"]
        est, cfm = flow["decoder"]["estimator"], flow["decoder"]["cfm_params"]
        cfm = cfm.get("content", cfm)

        def r(v):
            return _ref(v, top)

        fa = DiTFlowArgs(vocab_size=int(flow["vocab_size"]), input_size=int(flow["input_size"]),
                         output_size=int(flow["output_size"]), spk_embed_dim=int(r(flow["spk_embed_dim"])),
                         token_mel_ratio=int(r(flow["token_mel_ratio"])),
                         pre_lookahead_len=int(flow["pre_lookahead_len"]),
                         pre_lookahead_channels=int(flow["pre_lookahead_layer"]["channels"]),
                         dim=int(est["dim"]), depth=int(est["depth"]), heads=int(est["heads"]),
                         dim_head=int(est["dim_head"]), ff_mult=int(est["ff_mult"]),
                         static_chunk_size=int(r(est["static_chunk_size"])),
                         inference_cfg_rate=float(cfm["inference_cfg_rate"]))
        ha = HiFTArgs(in_channels=int(hift["in_channels"]), base_channels=int(hift["base_channels"]),
                      nb_harmonics=int(hift["nb_harmonics"]), sampling_rate=int(r(hift["sampling_rate"])),
                      nsf_alpha=float(hift["nsf_alpha"]), nsf_sigma=float(hift["nsf_sigma"]),
                      nsf_voiced_threshold=float(hift["nsf_voiced_threshold"]),
                      upsample_rates=tuple(hift["upsample_rates"]),
                      upsample_kernel_sizes=tuple(hift["upsample_kernel_sizes"]),
                      n_fft=int(hift["istft_params"]["n_fft"]), hop_len=int(hift["istft_params"]["hop_len"]),
                      resblock_kernel_sizes=tuple(hift["resblock_kernel_sizes"]),
                      resblock_dilation_sizes=tuple(map(tuple, hift["resblock_dilation_sizes"])),
                      source_resblock_kernel_sizes=tuple(hift["source_resblock_kernel_sizes"]),
                      source_resblock_dilation_sizes=tuple(map(tuple, hift["source_resblock_dilation_sizes"])),
                      lrelu_slope=float(hift["lrelu_slope"]), audio_limit=float(hift["audio_limit"]),
                      f0_channels=int(hift["f0_predictor"]["cond_channels"]),
                      conv_pre_look_right=int(hift["conv_pre_look_right"]))
        s = llm.get("sampling") or {}
        sa = SamplingArgs(top_p=float(s.get("top_p", 0.8)), top_k=int(s.get("top_k", 25)),
                          win_size=int(s.get("win_size", 10)), tau_r=float(s.get("tau_r", 0.1)))
        speech = int(llm["speech_token_size"])
        rate, chunk = int(top["token_frame_rate"]), int(top["chunk_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: missing or invalid setting ({e!r})") from None
    return CosyVoice3Args(lm=read_lm_args(folder), speech_token_size=speech, sampling=sa, flow=fa, hift=ha,
                          sample_rate=int(top.get("sample_rate", 24000)), token_frame_rate=rate, chunk_size=chunk)


def read_lm_args(folder: Path) -> LMArgs:
    path = Path(folder) / "CosyVoice-BlankEN" / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{folder}: no CosyVoice-BlankEN/config.json (the Qwen2 LM's config)") from None
    except ValueError as e:
        raise CheckpointError(f"{path}: not JSON ({e})") from None
    return LMArgs.from_hf(config)
