"""The AudioVAE's MLX modules, channels-last ``[B, T, C]``, named as the checkpoint's tensors.

Every conv of the checkpoint is weight-normed (``weight_g``, ``weight_v``); :func:`fold_weight_norm`
turns each pair into the plain ``weight`` once at load, so inference pays nothing for it.  All
convs are causal, so the decoder streams: a :class:`DecodeStream` carries each conv's left
context between calls and a stream of latent patches decodes to exactly the one-pass audio.
"""
from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ttscli.checkpoint import fold_weight_norm  # noqa: F401  (re-exported)
from ttscli.codecs.audiovae.config import AudioVAEArgs
from ttscli.nn.conv import Conv1d, ConvState, ConvTranspose1d, DepthwiseConv1d
from ttscli.nn.spectral import snake

States = dict[int, ConvState]


def _run(conv, x: mx.array, states: States | None) -> mx.array:
    if states is None:
        return conv(x)
    st = states.get(id(conv))
    if st is None:
        st = states[id(conv)] = conv.make_state()
    return conv(x, state=st)


class Snake1d(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.alpha = mx.ones((1, channels, 1))

    def __call__(self, x: mx.array, states: States | None = None) -> mx.array:
        return snake(x, self.alpha[0, :, 0])


class Tanh(nn.Module):
    def __call__(self, x: mx.array, states: States | None = None) -> mx.array:
        return mx.tanh(x)


def causal_conv(cin: int, cout: int, k: int, dilation: int = 1, groups: int = 1, padding: Any = "causal"):
    if groups == 1:
        return Conv1d(cin, cout, k, dilation=dilation, padding=padding)
    if groups != cin or cin != cout:
        raise ValueError(f"grouped conv {cin}->{cout} in {groups} groups: only depthwise is supported")
    return DepthwiseConv1d(cin, k, dilation=dilation, padding=padding)


class ResidualUnit(nn.Module):
    """x + conv1(snake(conv7_dilated(snake(x))))."""

    def __init__(self, dim: int, dilation: int, groups: int):
        super().__init__()
        self.block = [Snake1d(dim), causal_conv(dim, dim, 7, dilation, groups), Snake1d(dim),
                      Conv1d(dim, dim, 1)]

    def __call__(self, x: mx.array, states: States | None = None) -> mx.array:
        y = self.block[0](x)
        y = _run(self.block[1], y, states)
        y = self.block[2](y)
        return x + self.block[3](y)


def _chain(layers, x: mx.array, states: States | None) -> mx.array:
    for layer in layers:
        x = _run(layer, x, states) if isinstance(layer, (Conv1d, ConvTranspose1d, DepthwiseConv1d)) \
            else layer(x, states)
    return x


class EncoderBlock(nn.Module):
    def __init__(self, dim: int, stride: int, depthwise: bool):
        super().__init__()
        cin = dim // 2
        g = cin if depthwise else 1
        # kernel 2s, stride s, s frames of left padding: upstream's padding ceil(s/2) with
        # output_padding s % 2
        self.block = [ResidualUnit(cin, 1, g), ResidualUnit(cin, 3, g), ResidualUnit(cin, 9, g), Snake1d(cin),
                      Conv1d(cin, dim, 2 * stride, stride=stride, padding=(stride, 0))]

    def __call__(self, x: mx.array, states: States | None = None) -> mx.array:
        return _chain(self.block, x, None)


class Encoder(nn.Module):
    def __init__(self, a: AudioVAEArgs):
        super().__init__()
        d = a.encoder_dim
        self.block = [Conv1d(1, d, 7, padding="causal")]
        for stride in a.encoder_rates:
            d *= 2
            self.block.append(EncoderBlock(d, stride, a.depthwise))
        self.fc_mu = Conv1d(d, a.latent_dim, 3, padding="causal")
        self.fc_logvar = Conv1d(d, a.latent_dim, 3, padding="causal")

    def __call__(self, x: mx.array) -> mx.array:
        return self.fc_mu(_chain(self.block, x, None))


class DecoderBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, depthwise: bool):
        super().__init__()
        g = cout if depthwise else 1
        self.block = [Snake1d(cin), ConvTranspose1d(cin, cout, 2 * stride, stride=stride, padding="causal"),
                      ResidualUnit(cout, 1, g), ResidualUnit(cout, 3, g), ResidualUnit(cout, 9, g)]
        self.input_channels = cin

    def __call__(self, x: mx.array, states: States | None = None) -> mx.array:
        return _chain(self.block, x, states)


class RateCondition(nn.Module):
    """``scale_bias``: x * scale[bucket] + bias[bucket], the bucket of the output rate."""

    def __init__(self, dim: int, buckets: int):
        super().__init__()
        self.scale_embed = nn.Embedding(buckets, dim)
        self.bias_embed = nn.Embedding(buckets, dim)

    def __call__(self, x: mx.array, bucket: int) -> mx.array:
        return x * self.scale_embed.weight[bucket] + self.bias_embed.weight[bucket]


class Decoder(nn.Module):
    def __init__(self, a: AudioVAEArgs):
        super().__init__()
        if a.use_noise_block:
            raise ValueError("AudioVAE with use_noise_block is not supported (the released VoxCPM2 has none)")
        if a.sr_bin_boundaries is not None and a.cond_type != "scale_bias":
            raise ValueError(f"AudioVAE cond_type {a.cond_type!r} is not supported (only scale_bias)")
        ch, lat = a.decoder_dim, a.latent_dim
        if a.depthwise:
            self.model = [causal_conv(lat, lat, 7, groups=lat), Conv1d(lat, ch, 1)]
        else:
            self.model = [Conv1d(lat, ch, 7, padding="causal")]
        for i, stride in enumerate(a.decoder_rates):
            self.model.append(DecoderBlock(ch // 2 ** i, ch // 2 ** (i + 1), stride, a.depthwise))
        out = ch // 2 ** len(a.decoder_rates)
        self.model += [Snake1d(out), Conv1d(out, 1, 7, padding="causal"), Tanh()]
        self.boundaries = None if a.sr_bin_boundaries is None else list(a.sr_bin_boundaries)
        if self.boundaries is not None:
            n = len(self.boundaries) + 1
            self.sr_cond_model = [RateCondition(layer.input_channels, n) if isinstance(layer, DecoderBlock)
                                  else nn.Module() for layer in self.model]

    def bucket(self, rate: int) -> int:
        """torch.bucketize(rate, boundaries): how many boundaries lie strictly below ``rate``."""
        return int(np.searchsorted(np.asarray(self.boundaries), rate, side="left"))

    def __call__(self, z: mx.array, rate: int, states: States | None = None) -> mx.array:
        bucket = None if self.boundaries is None else self.bucket(rate)
        x = z
        for i, layer in enumerate(self.model):
            if bucket is not None and isinstance(layer, DecoderBlock):
                x = self.sr_cond_model[i](x, bucket)
            if isinstance(layer, (Conv1d, ConvTranspose1d, DepthwiseConv1d)):
                x = _run(layer, x, states)
            else:
                x = layer(x, states)
        return x


class AudioVAE(nn.Module):
    """``encode``: audio ``[B, T]`` at ``sample_rate`` -> latents ``[B, T / hop, latent_dim]``;
    ``decode``: latents -> audio ``[B, T * decode_hop]`` at ``out_sample_rate``."""

    def __init__(self, a: AudioVAEArgs):
        super().__init__()
        self.args = a
        self.encoder = Encoder(a)
        self.decoder = Decoder(a)

    def encode(self, audio: mx.array) -> mx.array:
        hop = self.args.hop
        pad = -audio.shape[-1] % hop
        if pad:
            audio = mx.pad(audio, [(0, 0), (0, pad)])
        return self.encoder(audio[..., None])

    def decode(self, z: mx.array, states: States | None = None) -> mx.array:
        return self.decoder(z, self.args.out_sample_rate, states)[..., 0]


class DecodeStream:
    """Latents decoded a few frames at a time with each causal conv's context carried over:
    the concatenated output equals :meth:`AudioVAE.decode` of all frames at once."""

    def __init__(self, vae: AudioVAE):
        self.vae = vae
        self.states: States = {}

    def push(self, z: mx.array) -> mx.array:
        return self.vae.decode(z, self.states)
