"""Emitters for iSTFTNet-style vocoder graphs (HiFi-GAN generator, Snake, iSTFT) on onnxruntime.

Kokoro's decoder (models/kokoro/onnx_export.py) and S3Gen's HiFT (codecs/s3gen/onnx_hift.py,
Chatterbox's vocoder) are the same network up to how Snake's input is made (an AdaIN in Kokoro,
the raw residual stream in HiFT); both build their generator from :class:`ConvNet`.

Tensors are channels-first ``[1, C, T]`` or, with ``conv2d``, ``[1, C, 1, T]`` with ``1 x k``
kernels: onnxruntime's blocked NCHWc conv kernels only take 2-D convs, and at HiFi-GAN's sizes
they beat its 1-D path on the project's 2-core AVX2 CPU (docs/benchmarks.md#kokoro-backends-busy).

The long same-padded convs of a generator's resblocks can run as overlap-save FFT convolutions
(:meth:`ConvNet.conv_fft`, Kokoro's decoder does): at 128-256 channels, faster than
onnxruntime's direct conv (:data:`FFT_BLOCK`; docs/benchmarks.md#kokoro-fft-conv-per-conv), within 4e-7 of it.

Snake (``y + sin^2(a y) / a``) is emitted as ``(u + sin^2 u) / a`` with ``u = a y``: whoever
makes ``y`` (a norm's projection, a conv's weight) makes ``u`` instead, and the ``1 / a`` moves
into the next conv's weight, saving two passes over the generator's largest tensors per Snake.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .graph import Builder


# Block length of the FFT convolution per (kernel size, dilation); the rest stay direct convs:
# the cases where the FFT form won clearly (docs/benchmarks.md#code-comment-figures). k=3 loses; k=11 at dilation 5
# (block 128) and k=7 at 3 (block 64) gain too, but in Kokoro they would add ~180 MB of mixing
# matrices for a few percent.
FFT_BLOCK = {(7, 1): 32, (11, 1): 64, (11, 3): 64}


class ConvNet:
    """Conv-stack ops over a :class:`Builder` with weights in PyTorch layout (``get(name)``:
    ``Conv1d.weight [out, in, k]``, ``ConvTranspose1d.weight [in, out, k]``).

    ``fft_min_channels``: same-padded stride-1 convs with at least this many input and output
    channels and a (kernel, dilation) in :data:`FFT_BLOCK` run as FFT convolutions (2-D layout
    only; None, the default: never). Kokoro's decoder takes 128. Chatterbox's HiFT does not: its
    decode of 5.8 s gained ~7% (1.37-1.50 s against 1.46-1.93 s) for a graph 6x the size (428 MB
    against 70 MB), since its largest stage has 64 channels, where the FFT does not pay.
    """

    fft_min_channels: int | None = None

    def __init__(self, b: Builder, w, conv2d: bool):
        self.b, self.w, self.d2 = b, w, conv2d

    def p(self, name: str) -> np.ndarray:
        return np.asarray(self.w.get(name), np.float32)

    def op(self, kind: str, *ins: str, **attrs) -> str:
        return self.b.node(kind, list(ins), **attrs)[0]

    def i64(self, v, name: str = "i") -> str:
        return self.b.const(self.b.name(name), np.array(v, np.int64))

    def f32(self, v, name: str = "k") -> str:
        return self.b.const(self.b.name(name), np.array(v, np.float32))

    def k(self, w: np.ndarray) -> np.ndarray:
        """A conv weight ``[O, I, k]`` in this layout."""
        return w[:, :, None, :] if self.d2 else w

    def attrs(self, stride: int = 1, dilation: int = 1, pad: tuple[int, int] = (0, 0), **extra) -> dict:
        if self.d2:
            out = {"strides": [1, stride], "dilations": [1, dilation], "pads": [0, pad[0], 0, pad[1]]}
            return out | {k: [0, v] for k, v in extra.items()}
        return {"strides": [stride], "dilations": [dilation], "pads": list(pad)} | {k: [v] for k, v in extra.items()}

    def conv(self, x: str, name: str, stride: int = 1, dilation: int = 1, pad: tuple[int, int] = (0, 0),
             in_scale: np.ndarray | None = None, out_scale: np.ndarray | None = None) -> str:
        """``in_scale``: the input arrives multiplied by this per channel, the weight divides it
        out; ``out_scale``: the output is wanted multiplied by this per channel (weight and bias)."""
        w = self.p(name + ".weight")
        bias = self.p(name + ".bias") if name + ".bias" in self.w else None
        if in_scale is not None:
            w = w / in_scale[None, :, None]
        if out_scale is not None:
            w = w * out_scale[:, None, None]
            bias = None if bias is None else bias * out_scale
        span = dilation * (w.shape[2] - 1) + 1
        plan = FFT_BLOCK.get((w.shape[2], dilation))
        if (self.d2 and plan and self.fft_min_channels is not None and min(w.shape[:2]) >= self.fft_min_channels
                and stride == 1 and tuple(pad) == ((span - 1) // 2,) * 2):
            stuffed = np.zeros((*w.shape[:2], span), np.float32)       # the dilation as zero taps
            stuffed[:, :, ::dilation] = w
            return self.conv_fft(x, name, stuffed, bias, plan)
        ins = [x, self.b.const(name + ".weight", self.k(w))]
        if bias is not None:
            ins.append(self.b.const(name + ".bias", bias))
        return self.b.node("Conv", ins, **self.attrs(stride, dilation, pad))[0]

    def _dft_bases(self, n: int, span: int) -> tuple[str, str]:
        """The forward real-DFT conv weight ``[2F, 1, 1, n]`` (rows: frequency, then re/im) and the
        inverse ``[hop, 2F]`` that keeps a block's last ``hop`` samples; one copy per graph."""
        kept = self.__dict__.setdefault("_bases", {})
        F = n // 2 + 1
        f = np.arange(F)
        if n not in kept:
            ang = 2 * np.pi * np.outer(f, np.arange(n)) / n
            fwd = np.stack([np.cos(ang), -np.sin(ang)], 1).reshape(2 * F, 1, 1, n)
            kept[n] = self.b.const(self.b.name(f"dft{n}"), fwd.astype(np.float32))
        if (n, span) not in kept:
            c = np.full(F, 2.0)                            # each bin stands for itself and its mirror
            c[0] = 1.0
            if n % 2 == 0:
                c[-1] = 1.0
            ang = 2 * np.pi * np.outer(f, np.arange(span - 1, n)) / n
            inv = np.stack([c[:, None] * np.cos(ang), -c[:, None] * np.sin(ang)], 1).reshape(2 * F, -1) / n
            kept[(n, span)] = self.b.const(self.b.name(f"idft{n}_{span}"), np.ascontiguousarray(inv.T, np.float32))
        return kept[n], kept[(n, span)]

    def conv_fft(self, x: str, name: str, w: np.ndarray, bias: np.ndarray | None, n: int) -> str:
        """The same-padded stride-1 conv of ``x [1, I, 1, T]`` by ``w [O, I, S]`` as overlap-save
        convolution in blocks of ``n`` samples, ``n - S + 1`` new ones per block.

        Three products and no element-wise transposes: the input's channels become the rows of
        a one-channel image, whose blocks one strided conv transforms (the real DFT, its rows in
        (frequency, re/im) order), giving ``[n/2 + 1, 2I, blocks]``; per frequency a batched
        MatMul mixes the channels (complex ``O x I``, as a real ``2O x 2I``); one MatMul takes
        every (channel, block) back to its last ``n - S + 1`` samples, and a 2-D transpose lays
        them out in time.
        """
        co, ci, span = w.shape
        hop, F = n - span + 1, n // 2 + 1
        fwd, inv = self._dft_bases(n, span)
        h = np.zeros((co, ci, n))
        h[:, :, :span] = w[:, :, ::-1]                     # correlation -> convolution, zero-padded
        W = np.fft.rfft(h, axis=-1).transpose(2, 0, 1)     # [F, O, I]
        mix = np.concatenate([np.concatenate([W.real, -W.imag], 2), np.concatenate([W.imag, W.real], 2)], 1)
        pad = (span - 1) // 2
        rows = self.op("Reshape", x, self.i64([1, 1, ci, -1], "rows"))
        fr = self.b.node("Conv", [rows, fwd], strides=[1, hop], pads=[0, pad, 0, pad + hop - 1])[0]  # [1,2F,I,blocks]
        spec = self.op("Reshape", fr, self.i64([F, 2 * ci, -1], "spec"))
        mixed = self.op("MatMul", self.b.const(name + ".mix", mix.astype(np.float32)), spec)    # [F, 2O, blocks]
        flat = self.op("Reshape", mixed, self.i64([2 * F, -1], "flat"))
        out = self.op("MatMul", inv, flat)                                                     # [hop, O * blocks]
        y = self.op("Reshape", self.op("Transpose", out, perm=[1, 0]), self.i64([1, co, 1, -1], "y"))
        y = self.op("Slice", y, self.i64([0], "z"), self.op("Shape", x, start=3, end=4), self.i64([3], "ax"))
        return y if bias is None else self.op("Add", y, self.b.const(name + ".bias", bias[None, :, None, None]))

    def conv_t(self, x: str, name: str, stride: int, pad: int, out_pad: int = 0, group: int = 1) -> str:
        ins = [x, self.b.const(name + ".weight", self.k(self.p(name + ".weight"))),
               self.b.const(name + ".bias", self.p(name + ".bias"))]
        extra = {"output_padding": out_pad} if out_pad else {}
        return self.b.node("ConvTranspose", ins, group=group, **self.attrs(stride, 1, (pad, pad), **extra))[0]

    def snake_conv(self, u: str, alpha: np.ndarray, conv: str, **kw) -> str:
        """``conv(snake(y))`` given ``u = alpha y`` (see the module's docstring); ``kw``: the conv's.
        ``alpha`` is never 0 in the checkpoints (smallest |a|: 9.5e-5 in Kokoro's)."""
        sn = self.op("Sin", u)
        return self.conv(self.op("Add", u, self.op("Mul", sn, sn)), conv, in_scale=alpha, **kw)

    def resblock(self, x: str, name: str, kernel: int, dilations, alpha: Callable[[str, int, int], str],
                 scaled: Callable[[str, str, int, int, np.ndarray], str] | None = None) -> str:
        """HiFi-GAN's ResBlock1: per dilation d, ``x += conv2(snake2(conv1_d(snake1(x))))``.

        ``alpha(name, stage, j)``: the weight name of Snake ``stage`` (1, 2) of unit ``j``.
        ``scaled(x, name, stage, j, a)``: Snake's input times ``a`` (Kokoro: an AdaIN whose projection takes
        ``a``); None: Snake acts on ``x`` itself (HiFT), so ``x`` is multiplied by ``a1`` and
        ``conv1``'s weight takes ``a2``."""
        pad = (kernel - 1) // 2
        for j, d in enumerate(dilations):
            a1, a2 = (self.p(alpha(name, s, j)).reshape(-1) for s in (1, 2))
            c1, c2 = f"{name}.convs1.{j}", f"{name}.convs2.{j}"
            if scaled is None:
                col = a1.reshape(-1, *[1] * (1 + self.d2))            # per channel, over [1, C, (1,) T]
                u = self.op("Mul", x, self.b.const(self.b.name(alpha(name, 1, j)), col))
                t = self.snake_conv(u, a1, c1, dilation=d, pad=(d * pad,) * 2, out_scale=a2)
                t = self.snake_conv(t, a2, c2, pad=(pad, pad))
            else:
                t = self.snake_conv(scaled(x, name, 1, j, a1), a1, c1, dilation=d, pad=(d * pad,) * 2)
                t = self.snake_conv(scaled(t, name, 2, j, a2), a2, c2, pad=(pad, pad))
            x = self.op("Add", t, x)
        return x

    def mean_of_resblocks(self, x: str, blocks: list[tuple[str, int, tuple]], **kw) -> str:
        """The generator's multi-receptive-field fusion: the mean of several resblocks of ``x``."""
        xs = None
        for name, kernel, dilations in blocks:
            y = self.resblock(x, name, kernel, dilations, **kw)
            xs = y if xs is None else self.op("Add", xs, y)
        return self.op("Div", xs, self.b.const(self.b.name("nk"), np.array(len(blocks), np.float32)))

    def reflect_pad_left(self, x: str) -> str:
        """PyTorch's ``ReflectionPad1d((1, 0))`` on the time axis: frame 1 prepended."""
        first = self.op("Slice", x, self.i64([1], "a"), self.i64([2], "b"), self.i64([-1], "ax"))
        return self.op("Concat", first, x, axis=-1)


def stft(b: Builder, x: str, n_fft: int, hop: int) -> str:
    """torch.stft (center, reflect, periodic Hann) of ``x [1, 1, L]`` -> ``[1, 2 bins, L/hop + 1]``
    (real ‖ imag) as a strided conv with the windowed DFT basis."""
    from ttscli.nn.spectral import stft_basis

    pads = b.const("pads", np.array([0, 0, n_fft // 2, 0, 0, n_fft // 2], np.int64))
    xp = b.node("Pad", [x, pads], mode="reflect")[0]
    # [n_fft, 2 bins] -> a conv weight [2 bins, 1, n_fft]; the DC and Nyquist imaginary rows are exactly zero
    basis = np.ascontiguousarray(np.asarray(stft_basis(n_fft)).T[:, None, :])
    return b.node("Conv", [xp, b.const("stft_basis", basis)], strides=[hop])[0]


def istft(b: Builder, mag: str, phase: str, n_fft: int, hop: int) -> str:
    """torch.istft (center, periodic Hann) of ``mag``/``phase [1, bins, F]`` -> ``[1, 1, (F-1) hop]``:
    a transposed conv with the windowed inverse-DFT basis, divided by the overlap-added squared
    window (the same transposed conv of ones)."""
    from ttscli.nn.spectral import hann, istft_basis

    def op(kind, *ins, **kw):
        return b.node(kind, list(ins), **kw)[0]

    def i64(name, v):
        return b.const(name, np.array(v, np.int64))

    spec = op("Concat", op("Mul", mag, op("Cos", phase)), op("Mul", mag, op("Sin", phase)), axis=1)
    y = op("ConvTranspose", spec, b.const("istft_basis", np.asarray(istft_basis(n_fft))), strides=[hop],
           pads=[n_fft // 2] * 2)
    ones = op("ConstantOfShape", op("Shape", op("Slice", spec, i64("o0", [0]), i64("o1", [1]), i64("oax", [1]))),
              value=_tensor1(1.0))
    env = op("ConvTranspose", ones, b.const("window_sq", (hann(n_fft) ** 2).astype(np.float32)[None, None]),
             strides=[hop], pads=[n_fft // 2] * 2)
    return op("Div", y, env)


def _tensor1(v: float):
    from onnx import TensorProto, helper

    return helper.make_tensor("value", TensorProto.FLOAT, [1], [v])
