"""Mimi's SEANet encoder (``encoder.*`` of the Mimi model): causal convs, ELU residual blocks and
strided downsampling convs, 24 kHz samples -> 25 Hz frames (strides 4·5·6·8 for the published model).

Convs are PyTorch-layout weights on ttscli.nn.conv (``*.conv.weight``). On the Linux CPU every
conv runs as BLAS GEMMs (shifted per-tap products; strided kernels over blocks of ``stride``
frames), ELU runs in numpy (MLX's CPU exp is scalar and slow), and the first stages run in short
chunks with carried causal context.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ttscli.errors import CheckpointError
from ttscli.nn.conv import Conv1d, conv1d_accumulate, conv1d_im2col, pad_time

from .config import MimiArgs


class CausalConv1d(nn.Module):
    """MimiConv1d, causal: left pad (k_eff - stride), right pad up to a whole number of strides."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 bias: bool = True, pad_mode: str = "constant"):
        super().__init__()
        self.conv = Conv1d(in_ch, out_ch, kernel_size, bias=bias)    # weights and taps; padding is ours
        self.kernel_size, self.stride, self.dilation = kernel_size, stride, dilation
        if pad_mode not in ("constant", "replicate"):
            raise CheckpointError(f"Mimi: unsupported pad_mode {pad_mode!r} (constant or replicate)")
        self.pad_mode = "zeros" if pad_mode == "constant" else pad_mode

    def __call__(self, x: mx.array, residual: mx.array | None = None, cache: dict | None = None,
                 final: bool = True) -> mx.array:
        """``x [B, T, in]`` -> ``[B, ceil(T / stride), out]`` (+ ``residual``, folded into the GEMM).

        With ``cache`` the input is one chunk of a longer signal (a whole number of strides unless
        ``final``): the left context comes from the previous chunk instead of padding, and only
        the final chunk is padded on the right.
        """
        k, s, d = self.kernel_size, self.stride, self.dilation
        context = (k - 1) * d + 1 - s
        length = x.shape[1]
        right = (-(-length // s) * s - length) if final else 0
        prev = cache.get(id(self)) if cache is not None else None
        left = context
        if prev is not None:
            x = mx.concatenate([prev, x], axis=1)
            left = 0
        x = pad_time(x, left, right, self.pad_mode)
        if cache is not None and not final:
            cache[id(self)] = x[:, x.shape[1] - context:]
        taps, bias = self.conv.taps(), self.conv.get("bias")
        if k > 1 and taps.shape[1] >= 8 and (s == 1 or (d == 1 and k % s == 0)):
            # shifted GEMMs over contiguous per-tap weights, no [T, k*in] copy of the input:
            # faster than im2col or mx.conv1d for the SEANet shapes
            return conv1d_accumulate(x, taps, bias, d, s, residual)
        return conv1d_im2col(x, taps, bias, d, s, residual)


class ELU(nn.Module):
    """ELU (alpha 1) evaluated by numpy as max(x, exp(min(x, 0)) - 1): MLX's CPU exp is scalar and
    slow, and numpy's float32 ``exp`` is SIMD where its ``expm1`` is not (on an AVX2 CPU it calls
    libm per element), so this form is several times faster than ``expm1`` at the price of an
    absolute error below 2e-7 near zero. The SEANet applies ELU to ~70M activations per 10 s of
    audio, ten times per decoded frame; one host sync per call costs less than MLX's exp."""

    def __call__(self, x: mx.array) -> mx.array:
        a = np.asarray(x)
        out = np.minimum(a, 0.0)  # one temporary: fresh 60 MB buffers page-fault slowly in this VM
        np.exp(out, out=out)
        out -= 1.0
        np.maximum(a, out, out=out)
        return mx.array(out)


class ResnetBlock(nn.Module):
    def __init__(self, args: MimiArgs, dim: int, dilation: int):
        super().__init__()
        hidden = dim // args.compress
        self.block = [
            ELU(),
            CausalConv1d(dim, hidden, args.residual_kernel_size, dilation=dilation, pad_mode=args.pad_mode),
            ELU(),
            CausalConv1d(hidden, dim, 1, pad_mode=args.pad_mode),
        ]
        if args.use_conv_shortcut:
            self.shortcut = CausalConv1d(dim, dim, 1, pad_mode=args.pad_mode)

    def __call__(self, x: mx.array, cache: dict | None = None, final: bool = True) -> mx.array:
        y = x
        for layer in self.block[:-1]:
            y = layer(y, cache=cache, final=final) if isinstance(layer, CausalConv1d) else layer(y)
        res = self.shortcut(x, cache=cache, final=final) if "shortcut" in self else x
        return self.block[-1](y, residual=res, cache=cache, final=final)


class SEANetEncoder(nn.Module):
    def __init__(self, args: MimiArgs):
        super().__init__()
        pm = args.pad_mode
        layers: list = [CausalConv1d(args.audio_channels, args.num_filters, args.kernel_size, pad_mode=pm)]
        mult = 1
        for ratio in reversed(args.upsampling_ratios):
            dim = mult * args.num_filters
            for j in range(args.num_residual_layers):
                layers.append(ResnetBlock(args, dim, args.dilation_growth_rate ** j))
            layers.append(ELU())
            layers.append(CausalConv1d(dim, dim * 2, ratio * 2, stride=ratio, pad_mode=pm))
            mult *= 2
        layers.append(ELU())
        layers.append(CausalConv1d(mult * args.num_filters, args.hidden_size, args.last_kernel_size, pad_mode=pm))
        self.layers = layers

    def __call__(self, x: mx.array, chunk: int | None = None) -> mx.array:
        """``x [B, N, 1]`` -> ``[B, ceil(N / hop), hidden]``.

        ``chunk`` (a multiple of the hop) runs the first two stages chunk by chunk with carried causal
        context: the same result, but their 60 MB activations (10 s of audio) shrink to cache-sized
        ones. The later stages have few frames and wide weights, so they run on the whole clip
        (chunking them only re-reads weights). ~1.4x less CPU time for the SEANet here.
        """
        strided = [i for i, layer in enumerate(self.layers) if isinstance(layer, CausalConv1d) and layer.stride > 1]
        split = strided[1] + 1 if len(strided) > 1 else len(self.layers)
        if chunk is not None and x.shape[1] > chunk:
            cache: dict = {}
            outs = []
            for start in range(0, x.shape[1], chunk):
                y = self._run(self.layers[:split], x[:, start: start + chunk], cache, start + chunk >= x.shape[1])
                mx.eval(y)
                outs.append(y)
            x = mx.concatenate(outs, axis=1)
        else:
            x = self._run(self.layers[:split], x, None, True)
        return self._run(self.layers[split:], x, None, True)

    @staticmethod
    def _run(layers: list, x: mx.array, cache: dict | None, final: bool) -> mx.array:
        for layer in layers:
            x = layer(x, cache=cache, final=final) if isinstance(layer, (CausalConv1d, ResnetBlock)) else layer(x)
        return x
