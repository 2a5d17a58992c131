"""A Kyutai-layout Mimi checkpoint (moshi's, Pocket TTS's ``mimi.*``) under transformers' names,
which the modules of this package use.

The two layouts hold the same tensors: SEANet layers are ``model.N`` for ``layers.N``, transposed
convs ``convtr`` for ``conv``, transformer layers ``transformer.layers.N`` with ``norm1/norm2``,
``linear1/linear2``, ``layer_scale_1/2`` and one ``in_proj`` for q/k/v. Kyutai rotates adjacent
pairs (2i, 2i+1) with RoPE where transformers rotates (i, i + d/2): the q and k rows of each head
are permuted to match (the map transformers' own Mimi converter applies), so the attention
computes the same scores. :func:`kyutai_shapes` states the Kyutai names and shapes that a strict
load checks before renaming, so an error names the tensor as the file spells it.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import mlx.core as mx
import numpy as np

_LAYER = {"norm1": "input_layernorm", "norm2": "post_attention_layernorm", "linear1": "mlp.fc1",
          "linear2": "mlp.fc2", "layer_scale_1": "self_attn_layer_scale", "layer_scale_2": "mlp_layer_scale",
          "self_attn.out_proj": "self_attn.o_proj"}
_TRANSFORMER = re.compile(r"^(encoder|decoder)_transformer\.transformer\.layers\.(\d+)\.(.+)$")
_SEANET = re.compile(r"^(encoder|decoder)\.model\.(\d+)\.(.+)$")


def half_order(head_dim: int) -> np.ndarray:
    """Row order taking a head's interleaved rotary pairs to rotate-half pairs."""
    return np.concatenate([np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)])


def _rename(name: str) -> str | None:
    """transformers' name of one Kyutai tensor (None for ``in_proj``, which splits)."""
    m = _TRANSFORMER.match(name)
    if m:
        side, i, rest = m.groups()
        if rest == "self_attn.in_proj.weight":
            return None
        for old, new in _LAYER.items():
            if rest.startswith(old + "."):
                return f"{side}_transformer.layers.{i}.{new}{rest[len(old):]}"
        return f"{side}_transformer.layers.{i}.{rest}"
    m = _SEANET.match(name)
    if m:
        side, i, rest = m.groups()
        return f"{side}.layers.{i}.{rest.replace('convtr.', 'conv.')}"
    return {"downsample.conv.conv.weight": "downsample.conv.weight",
            "upsample.convtr.convtr.weight": "upsample.conv.weight"}.get(name, name)


def from_kyutai(weights: Mapping[str, mx.array], num_heads: int) -> dict[str, mx.array]:
    """Kyutai-named Mimi tensors -> transformers-named ones (q/k/v split and RoPE-permuted)."""
    out = {}
    for name, w in weights.items():
        new = _rename(name)
        if new is not None:
            out[new] = w
            continue
        prefix = name[: -len("self_attn.in_proj.weight")]
        dim = w.shape[0] // 3
        order = mx.array(np.concatenate([h * (dim // num_heads) + half_order(dim // num_heads)
                                         for h in range(num_heads)]))
        base = _rename(prefix + "self_attn.x.weight")[: -len("x.weight")]
        q, k, v = w[:dim], w[dim:2 * dim], w[2 * dim:]
        out.update({base + "q_proj.weight": q[order], base + "k_proj.weight": k[order], base + "v_proj.weight": v})
    return out


def kyutai_shapes(shapes: Mapping[str, tuple[int, ...]], transposed: frozenset[int] = frozenset()
                  ) -> dict[str, tuple[int, ...]]:
    """The Kyutai names and shapes of a module's transformers-named ``shapes`` (inverse of
    :func:`from_kyutai`): what a strict load of a Kyutai file expects. ``transposed``: the
    decoder's layer indices that are transposed convs (``SEANetDecoder.transposed``)."""
    inverse = {}
    for name, shape in shapes.items():
        if name.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            continue
        if name.endswith("self_attn.q_proj.weight"):
            layer = name[: -len("self_attn.q_proj.weight")]
            side, rest = layer.split("_transformer.layers.", 1)
            inverse[f"{side}_transformer.transformer.layers.{rest}self_attn.in_proj.weight"] = \
                (3 * shape[0], *shape[1:])
            continue
        inverse[_kyutai_name(name, transposed)] = tuple(shape)
    return inverse


def _kyutai_name(name: str, transposed: frozenset[int]) -> str:
    m = re.match(r"^(encoder|decoder)_transformer\.layers\.(\d+)\.(.+)$", name)
    if m:
        side, i, rest = m.groups()
        for old, new in _LAYER.items():
            if rest.startswith(new + "."):
                rest = old + rest[len(new):]
                break
        return f"{side}_transformer.transformer.layers.{i}.{rest}"
    m = re.match(r"^(encoder|decoder)\.layers\.(\d+)\.(.+)$", name)
    if m:
        side, i, rest = m.groups()
        if side == "decoder" and rest.startswith("conv.") and int(i) in transposed:
            rest = "convtr." + rest[len("conv."):]
        return f"{side}.model.{i}.{rest}"
    return {"downsample.conv.weight": "downsample.conv.conv.weight",
            "upsample.conv.weight": "upsample.convtr.convtr.weight"}.get(name, name)

