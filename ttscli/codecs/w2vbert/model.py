"""w2v-BERT 2.0 (transformers' ``Wav2Vec2BertModel``, ``facebook/w2v-bert-2.0``) in MLX.

A Conformer encoder over the SeamlessM4T features (:mod:`.features`): a LayerNorm + Linear
projection of the 160-wide rows, then blocks of

    x + 0.5 FFN1(LN(x)) -> + MHSA(LN(x)) -> + Conv(x) -> + 0.5 FFN2(LN(x)) -> LN

with swish feed-forwards, self-attention whose scores carry a learned relative-distance term
(``relative_key``: ``q_i . E[clamp(j - i, -left, right)]``, both terms divided by sqrt(d)) and a
convolution module (LN, pointwise conv to 2C, GLU, causal depthwise conv, LN, swish, pointwise
conv). Modules and attributes are named as the published checkpoint's tensors, so
``model.safetensors`` loads without renaming.

Callers that need a middle layer (IndexTTS2 and MaskGCT take hidden state 17 of 24) run only the
layers below it: :func:`load_w2vbert` can build a shortened stack, whose unused tensors are still
checked by name and shape but never loaded.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict, read_component, shapes
from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError
from ttscli.nn.compiled import compile_bounded
from ttscli.nn.conv import Conv1d, DepthwiseConv1d
from ttscli.nn.fastmath import fast_tanh, on_cpu

if TYPE_CHECKING:
    from .features import SeamlessArgs

MASKED = float(np.finfo(np.float32).min)   # the additive score of a padded key, as transformers uses


@dataclass
class W2VBertArgs(BaseArgs):
    """The fields of ``Wav2Vec2BertConfig`` (``config.json``) that inference reads; the defaults are
    ``facebook/w2v-bert-2.0``'s."""

    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    intermediate_size: int = 4096
    feature_projection_input_dim: int = 160
    hidden_act: str = "swish"
    layer_norm_eps: float = 1e-5
    position_embeddings_type: str | None = "relative_key"
    left_max_position_embeddings: int = 64
    right_max_position_embeddings: int = 8
    conv_depthwise_kernel_size: int = 31
    mask_time_prob: float = 0.05
    mask_feature_prob: float = 0.0
    add_adapter: bool = False
    use_intermediate_ffn_before_adapter: bool = False

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def check(self, source: str = "config.json") -> W2VBertArgs:
        """Refuse the options this implementation does not run (the published model uses none)."""
        if self.position_embeddings_type != "relative_key":
            raise CheckpointError(f"{source}: position_embeddings_type {self.position_embeddings_type!r} is not "
                                  "supported (w2v-BERT 2.0 uses 'relative_key')")
        if self.hidden_act not in ("swish", "silu"):
            raise CheckpointError(f"{source}: hidden_act {self.hidden_act!r} is not supported (w2v-BERT 2.0 uses "
                                  "'swish')")
        if self.add_adapter or self.use_intermediate_ffn_before_adapter:
            raise CheckpointError(f"{source}: an adapter / intermediate feed-forward after the encoder is not "
                                  "supported (w2v-BERT 2.0 has neither)")
        if self.hidden_size % self.num_attention_heads:
            raise CheckpointError(f"{source}: hidden_size {self.hidden_size} is not a multiple of "
                                  f"num_attention_heads {self.num_attention_heads}")
        if self.conv_depthwise_kernel_size % 2 == 0:
            raise CheckpointError(f"{source}: conv_depthwise_kernel_size must be odd, got "
                                  f"{self.conv_depthwise_kernel_size}")
        return self


# ----------------------------------------------------------------------------- activations

# sigmoid(x) = 1/2 + tanh(x/2)/2, through the rational tanh of ttscli.nn.fastmath (abs error 1.8e-7):
# pure multiply-adds that the compiled CPU kernel vectorises, where an exp built from exponent bits
# (or MLX's scalar sigmoid) runs an order of magnitude slower on these [T, 4096] activations.

@compile_bounded
def _swish_cpu(x: mx.array) -> mx.array:
    return x * (0.5 + fast_tanh(x, scale=0.5, out_scale=0.5))


@compile_bounded
def _glu_cpu(a: mx.array, b: mx.array) -> mx.array:
    return a * (0.5 + fast_tanh(b, scale=0.5, out_scale=0.5))


def swish(x: mx.array) -> mx.array:
    """x sigmoid(x): on the CPU one compiled kernel of multiply-adds, elsewhere MLX's own."""
    return _swish_cpu(x) if on_cpu() else nn.silu(x)


def glu(x: mx.array) -> mx.array:
    """``torch.nn.GLU`` over the last axis: first half times the sigmoid of the second."""
    a, b = mx.split(x, 2, axis=-1)
    return _glu_cpu(a, b) if on_cpu() else a * mx.sigmoid(b)


def attend(q: mx.array, k: mx.array, v: mx.array, scale: float, bias: mx.array) -> mx.array:
    """``softmax(q k^T scale + bias) v`` with a per-head additive ``bias [B, H, L, S]``, through
    MLX's attention kernel. (On the CPU it measured as fast as two GEMMs around the multiply-add
    softmax of ``ttscli.nn.fastmath``, within this machine's run-to-run noise, at T = 500.)"""
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=bias)


@lru_cache(maxsize=16)
def _distance_index(t: int, left: int, right: int) -> mx.array:
    """``[t, t]`` int32: row i, column j -> ``clamp(j - i, -left, right) + left``, the row of the
    distance table query i uses for key j. Built in numpy: a materialised array, safe to share."""
    pos = np.arange(t)
    d = np.clip(pos[None, :] - pos[:, None], -left, right) + left
    return mx.array(d.astype(np.int32))


# ----------------------------------------------------------------------------- modules

class Wav2Vec2BertFeatureProjection(nn.Module):
    def __init__(self, a: W2VBertArgs):
        super().__init__()
        self.layer_norm = nn.LayerNorm(a.feature_projection_input_dim, eps=a.layer_norm_eps)
        self.projection = nn.Linear(a.feature_projection_input_dim, a.hidden_size)

    def __call__(self, x: mx.array) -> mx.array:
        return self.projection(self.layer_norm(x))


class Wav2Vec2BertFeedForward(nn.Module):
    def __init__(self, a: W2VBertArgs):
        super().__init__()
        self.intermediate_dense = nn.Linear(a.hidden_size, a.intermediate_size)
        self.output_dense = nn.Linear(a.intermediate_size, a.hidden_size)

    def __call__(self, x: mx.array) -> mx.array:
        return self.output_dense(swish(self.intermediate_dense(x)))


class Wav2Vec2BertSelfAttention(nn.Module):
    """Multi-head self-attention with the ``relative_key`` distance term.

    The distance table has only ``left + right + 1`` rows, so the term is one small GEMM per head
    (``q @ E^T``, [T, left + right + 1]) gathered out to [T, T] and handed to MLX's attention kernel
    as an additive bias (with the padded keys' mask folded in): no [T, T, d] tensor is formed.
    """

    def __init__(self, a: W2VBertArgs):
        super().__init__()
        c = a.hidden_size
        self.num_heads, self.head_dim = a.num_attention_heads, a.head_dim
        self.left, self.right = a.left_max_position_embeddings, a.right_max_position_embeddings
        self.scale = self.head_dim ** -0.5
        self.linear_q = nn.Linear(c, c)
        self.linear_k = nn.Linear(c, c)
        self.linear_v = nn.Linear(c, c)
        self.linear_out = nn.Linear(c, c)
        self.distance_embedding = nn.Embedding(self.left + self.right + 1, self.head_dim)

    def __call__(self, x: mx.array, key_bias: mx.array | None = None) -> mx.array:
        """``x [B, T, C]``; ``key_bias [B, 1, 1, T]``: 0 for real keys, :data:`MASKED` for padding."""
        b, t, _ = x.shape
        h, d = self.num_heads, self.head_dim

        def heads(y):
            return y.reshape(b, t, h, d).transpose(0, 2, 1, 3)

        q, k, v = heads(self.linear_q(x)), heads(self.linear_k(x)), heads(self.linear_v(x))
        table = (q * self.scale) @ self.distance_embedding.weight.T                  # [B, H, T, W]
        index = mx.broadcast_to(_distance_index(t, self.left, self.right), (b, h, t, t))
        bias = mx.take_along_axis(table, index, axis=-1)                               # [B, H, T, T]
        if key_bias is not None:
            bias = bias + key_bias
        out = attend(q, k, v, self.scale, bias)
        return self.linear_out(out.transpose(0, 2, 1, 3).reshape(b, t, h * d))


class Wav2Vec2BertConvolutionModule(nn.Module):
    def __init__(self, a: W2VBertArgs):
        super().__init__()
        c, eps = a.hidden_size, a.layer_norm_eps
        self.layer_norm = nn.LayerNorm(c, eps=eps)
        self.pointwise_conv1 = Conv1d(c, 2 * c, 1, bias=False)
        self.depthwise_conv = DepthwiseConv1d(c, a.conv_depthwise_kernel_size, padding="causal", bias=False)
        self.depthwise_layer_norm = nn.LayerNorm(c, eps=eps)
        self.pointwise_conv2 = Conv1d(c, c, 1, bias=False)

    def __call__(self, x: mx.array, keep: mx.array | None = None) -> mx.array:
        """``keep [B, T, 1]``: 1 for real frames, 0 for padding (zeroed before the causal conv, so
        padding never leaks into a real frame)."""
        y = self.layer_norm(x)
        if keep is not None:
            y = y * keep
        y = self.depthwise_conv(glu(self.pointwise_conv1(y)))
        return self.pointwise_conv2(swish(self.depthwise_layer_norm(y)))


class Wav2Vec2BertEncoderLayer(nn.Module):
    def __init__(self, a: W2VBertArgs):
        super().__init__()
        c, eps = a.hidden_size, a.layer_norm_eps
        self.ffn1_layer_norm = nn.LayerNorm(c, eps=eps)
        self.ffn1 = Wav2Vec2BertFeedForward(a)
        self.self_attn_layer_norm = nn.LayerNorm(c, eps=eps)
        self.self_attn = Wav2Vec2BertSelfAttention(a)
        self.conv_module = Wav2Vec2BertConvolutionModule(a)
        self.ffn2_layer_norm = nn.LayerNorm(c, eps=eps)
        self.ffn2 = Wav2Vec2BertFeedForward(a)
        self.final_layer_norm = nn.LayerNorm(c, eps=eps)

    def __call__(self, x: mx.array, key_bias: mx.array | None = None, keep: mx.array | None = None) -> mx.array:
        x = x + 0.5 * self.ffn1(self.ffn1_layer_norm(x))
        x = x + self.self_attn(self.self_attn_layer_norm(x), key_bias)
        x = x + self.conv_module(x, keep)
        x = x + 0.5 * self.ffn2(self.ffn2_layer_norm(x))
        return self.final_layer_norm(x)


class Wav2Vec2BertEncoder(nn.Module):
    def __init__(self, a: W2VBertArgs, num_layers: int):
        super().__init__()
        self.layers = [Wav2Vec2BertEncoderLayer(a) for _ in range(num_layers)]


class Wav2Vec2BertModel(nn.Module):
    """The encoder, possibly shortened to its first ``num_layers`` layers (default: all).

    ``__call__(features, layer)`` is transformers' ``hidden_states[layer]``: 0 is the projected
    input, k the output of layer k. Features are ``[B, T, 160]`` (or ``[T, 160]``); ``mask``
    (``[B, T]`` / ``[T]``, true for real rows) is the extractor's ``attention_mask``.
    """

    def __init__(self, args: W2VBertArgs, num_layers: int | None = None):
        super().__init__()
        self.args = args.check()
        n = args.num_hidden_layers if num_layers is None else num_layers
        if not 0 <= n <= args.num_hidden_layers:
            raise ValueError(f"num_layers must be in 0..{args.num_hidden_layers}, got {n}")
        self.feature_projection = Wav2Vec2BertFeatureProjection(args)
        if args.mask_time_prob > 0 or args.mask_feature_prob > 0:
            # SpecAugment's mask vector (training only); kept so the published file loads strictly
            self.masked_spec_embed = mx.zeros((args.hidden_size,))
        self.encoder = Wav2Vec2BertEncoder(args, n)

    @property
    def num_layers(self) -> int:
        return len(self.encoder.layers)

    def hidden_states(self, features: mx.array, layer: int | None = None,
                      mask: mx.array | None = None) -> list[mx.array]:
        """``hidden_states[0..layer]`` (default: every layer built), each shaped as ``features``
        is (``[B, T, C]`` or ``[T, C]``)."""
        layer = self.num_layers if layer is None else layer
        if not 0 <= layer <= self.num_layers:
            raise ValueError(f"hidden state {layer} needs {layer} layers; this model runs {self.num_layers}")
        single = features.ndim == 2
        x = features[None] if single else features
        if mask is not None and single:
            mask = mask[None]
        x = self.feature_projection(x.astype(mx.float32))
        key_bias = keep = None
        if mask is not None:
            m = mask.astype(mx.bool_)
            keep = m[..., None].astype(x.dtype)
            key_bias = mx.where(m, 0.0, MASKED).astype(x.dtype)[:, None, None, :]
            x = x * keep
        out = [x]
        for blk in self.encoder.layers[:layer]:
            x = blk(x, key_bias, keep)
            out.append(x)
        return [h[0] for h in out] if single else out

    def __call__(self, features: mx.array, layer: int | None = None, mask: mx.array | None = None) -> mx.array:
        """``hidden_states[layer]`` (default: the last layer built), running only ``layer`` layers."""
        return self.hidden_states(features, layer, mask)[-1]


# ----------------------------------------------------------------------------- loading

def _layer_names(model: Wav2Vec2BertModel) -> dict[str, tuple[int, ...]]:
    """Name (relative to ``encoder.layers.N.``) -> shape of one layer's tensors."""
    probe = Wav2Vec2BertEncoderLayer(model.args)
    return shapes(dict(tree_flatten(probe.parameters())))


def load_w2vbert(folder: str | Path, layers: int | None = None) -> Wav2Vec2BertModel:
    """The published folder (``config.json`` + ``model*.safetensors``) as float32.

    ``layers``: build and load only the first ``layers`` Conformer layers (enough for
    ``hidden_states[layers]``). The tensors of the layers left out are still checked against the
    config by name and shape, and any tensor the model does not have is refused.
    """
    folder = Path(folder)
    cfg = folder / "config.json"
    args = W2VBertArgs.from_file(cfg).check(str(cfg))
    model = Wav2Vec2BertModel(args, layers)
    expected = shapes(dict(tree_flatten(model.parameters())))
    one = _layer_names(model)
    for i in range(model.num_layers, args.num_hidden_layers):
        expected.update({f"encoder.layers.{i}.{k}": v for k, v in one.items()})
    weights, source = read_component(folder, "")
    skipped = tuple(f"encoder.layers.{i}." for i in range(model.num_layers, args.num_hidden_layers))

    def drop_unused(w: dict) -> dict:
        return {k: v for k, v in w.items() if not k.startswith(skipped)} if skipped else w

    return load_strict(model, weights, source=source, dtype="float32", expected=expected, sanitize=drop_unused)


def random_w2vbert(args: W2VBertArgs | None = None, layers: int | None = None, seed: int = 0) -> Wav2Vec2BertModel:
    """The model at its real size (default ``facebook/w2v-bert-2.0``'s) with deterministic random
    weights (:func:`ttscli.nn.init.random_weights`), for timing and shape checks."""
    from ttscli.nn.init import random_weights

    return random_weights(Wav2Vec2BertModel(args or W2VBertArgs(), layers), seed=seed)


def semantic_features(model: Wav2Vec2BertModel, wav16: np.ndarray, layer: int,
                      mean: np.ndarray | None = None, std: np.ndarray | None = None,
                      feature_args: SeamlessArgs | None = None) -> mx.array:
    """``hidden_states[layer]`` ``[T, C]`` of a mono 16 kHz signal, optionally as
    ``(h - mean) / std`` (IndexTTS2's ``get_emb`` with ``wav2vec2bert_stats.pt``)."""
    from .features import seamless_inputs

    feats, valid = seamless_inputs(wav16, feature_args)
    h = model(mx.array(feats), layer, mx.array(valid))
    if mean is not None:
        h = (h - mx.array(np.asarray(mean, np.float32))) / mx.array(np.asarray(std, np.float32))
    return h


def read_stats(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``wav2vec2bert_stats.pt`` (``{"mean": [C], "var": [C]}``) -> ``(mean, std)`` float32."""
    from ttscli.torchfile import state_dict

    sd = state_dict(path)
    missing = [k for k in ("mean", "var") if k not in sd]
    if missing:
        raise CheckpointError(f"{path}: missing {', '.join(missing)} (expected a dict with 'mean' and 'var')")
    mean = np.asarray(sd["mean"], np.float32).reshape(-1)
    var = np.asarray(sd["var"], np.float32).reshape(-1)
    if mean.shape != var.shape:
        raise CheckpointError(f"{path}: mean {list(mean.shape)} and var {list(var.shape)} differ in shape")
    return mean, np.sqrt(var)
