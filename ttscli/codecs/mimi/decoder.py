"""Mimi's decoder (the decoder half of transformers' ``MimiModel``): latent frames at the model's
frame rate -> a mono 24 kHz waveform, in one call or as a stream of frames.

``upsample`` (a depthwise transposed conv back to the SEANet rate) -> a causal transformer
(transformer.py, ``decoder_transformer``) -> the SEANet decoder (``decoder``: causal convs, ELU
residual blocks, strided transposed convs). Every stage is causal and carries its state in a
:class:`DecoderStream`, so frames decoded one at a time give the same samples as one call over
all of them, and first audio is ready after the first frame. Attributes are named as
transformers' tensors (``decoder.layers.N.conv.weight`` ...); a Kyutai-layout checkpoint is
renamed by kyutai.py.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from ttscli.nn.conv import ConvState, ConvTranspose1d, DepthwiseConvTranspose1d

from .config import MimiArgs
from .seanet import ELU, CausalConv1d, ResnetBlock
from .transformer import Transformer, WindowCache


class CausalConvTranspose1d(nn.Module):
    """MimiConvTranspose1d, causal: T frames -> T * stride samples (the overlap past the end
    waits in the stream state for the next frames)."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int, bias: bool = True):
        super().__init__()
        self.conv = ConvTranspose1d(in_ch, out_ch, kernel_size, stride, padding="causal", bias=bias)

    def __call__(self, x: mx.array, stream: "DecoderStream") -> mx.array:
        return self.conv(x, stream.conv(self))


class Upsample(nn.Module):
    """``upsample``: the latent rate -> the SEANet rate, one depthwise transposed conv."""

    def __init__(self, args: MimiArgs):
        super().__init__()
        s = args.downsample_stride
        self.conv = DepthwiseConvTranspose1d(args.hidden_size, 2 * s, s)

    def __call__(self, x: mx.array, stream: "DecoderStream") -> mx.array:
        return self.conv(x, stream.conv(self))


class SEANetDecoder(nn.Module):
    """SEANet frames ``[B, T, hidden]`` -> samples ``[B, T * hop, 1]`` (ratios in the config's
    order, e.g. 8·6·5·4)."""

    def __init__(self, args: MimiArgs):
        super().__init__()
        pm = args.pad_mode
        mult = 2 ** len(args.upsampling_ratios)
        layers: list = [CausalConv1d(args.hidden_size, mult * args.num_filters, args.kernel_size, pad_mode=pm)]
        for ratio in args.upsampling_ratios:
            dim = mult * args.num_filters
            layers.append(ELU())
            layers.append(CausalConvTranspose1d(dim, dim // 2, ratio * 2, ratio))
            for j in range(args.num_residual_layers):
                layers.append(ResnetBlock(args, dim // 2, args.dilation_growth_rate ** j))
            mult //= 2
        layers.append(ELU())
        layers.append(CausalConv1d(args.num_filters, args.audio_channels, args.last_kernel_size, pad_mode=pm))
        self.layers = layers

    @property
    def transposed(self) -> frozenset[int]:
        """Indices of the transposed convs (Kyutai names them ``convtr``)."""
        return frozenset(i for i, layer in enumerate(self.layers) if isinstance(layer, CausalConvTranspose1d))

    def __call__(self, x: mx.array, stream: "DecoderStream") -> mx.array:
        for layer in self.layers:
            if isinstance(layer, CausalConvTranspose1d):
                x = layer(x, stream)
            elif isinstance(layer, (CausalConv1d, ResnetBlock)):
                x = layer(x, cache=stream.convs, final=False)   # stride 1: whole frames, no right pad
            else:
                x = layer(x)
        return x


class DecoderStream:
    """A stream's state: each causal conv's input tail and the transformer's windowed caches."""

    def __init__(self, transformer: Transformer):
        self.convs: dict = {}       # CausalConv1d's own cache (keyed by the conv)
        self.states: dict[int, ConvState] = {}
        self.attention: list[WindowCache] = transformer.new_cache()

    def conv(self, module: nn.Module) -> ConvState:
        return self.states.setdefault(id(module), ConvState())


class MimiDecoder(nn.Module):
    def __init__(self, args: MimiArgs):
        super().__init__()
        self.args = args
        self.upsample = Upsample(args)
        self.decoder_transformer = Transformer(args)
        self.decoder = SEANetDecoder(args)

    def new_stream(self) -> DecoderStream:
        return DecoderStream(self.decoder_transformer)

    def __call__(self, emb: mx.array, stream: DecoderStream | None = None) -> mx.array:
        """``emb [B, T, hidden]`` latent frames (after the quantizer's output projection) ->
        ``[B, T * frame_samples]``; with ``stream`` the frames continue that stream."""
        stream = stream or self.new_stream()
        x = self.upsample(emb, stream)
        x = self.decoder_transformer(x, stream.attention)
        return self.decoder(x, stream)[..., 0]
