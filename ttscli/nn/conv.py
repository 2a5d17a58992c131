"""1-D convolutions as GEMMs, for every vocoder and audio encoder.

MLX's CPU backend runs dilated, strided and transposed ``conv1d`` on a generic path that never
reaches BLAS, orders of magnitude slower than the same conv as shifted GEMMs or, transposed, as
one GEMM and an overlap-add (docs/benchmarks.md#code-comment-figures). Every conv here is one or
a few BLAS products plus cheap shifted sums.

Weights stay in the checkpoint's own (PyTorch) layout, so modules load without renaming or
transposing: ``Conv1d.weight [out, in, k]``, ``ConvTranspose1d.weight [in, out, k]``,
``DepthwiseConv1d.weight [C, 1, k]``. Each module derives the GEMM layout a form needs on first
use and keeps it until the weight array is replaced (e.g. by ``load_weights``).

Layouts: channels-last ``x [..., T, C]`` (any leading dims, ``[T, C]`` too) for the ``__call__``
forms; channels-first ``x [C, T]`` for the ``cf`` forms (each tap is then a band of contiguous
rows: faster than channels-last at HiFi-GAN's 32-128 channels and long T).

Padding (``padding=``): an int (both sides, PyTorch's meaning), ``(left, right)``, ``"same"``
(PyTorch's ``padding="same"``: ``d(k-1)`` split with the extra frame on the right) or
``"causal"`` (``d(k-1)`` on the left). ``pad_mode``: ``"zeros"``, ``"reflect"`` or
``"replicate"``. A causal conv given a :class:`ConvState` takes its left context from the
previous call instead of zeros, so a stream decoded in chunks equals one pass.

Which form for which case (all compute the same function; they differ in speed):

======================  =====================================================================
``Conv1d.__call__``     channels-last, picks: k=1 -> one GEMM; short inputs (<= 512 output rows)
                        -> ``im2col`` (one GEMM over stacked taps: weight-bound, one product
                        beats k); else ``accumulate``.
``Conv1d.accumulate``   channels-last, one GEMM per tap on a row slice of the input, summed in
                        place by ``addmm``: long inputs, wide channels; stride s when
                        ``k % s == 0`` (the taps then act on blocks of s frames).
``Conv1d.im2col``       channels-last, one GEMM on ``[T', k*in]`` (any stride/dilation).
``Conv1d.output_side``  channels-last, ``x [T, in] @ W [in, k*out]`` then a compiled shifted
                        sum: long inputs with few channels (HiFi-GAN's last stages, 3x im2col).
``Conv1d.cf``           channels-first ``W [k*out, in] @ x`` then a shifted sum of row bands.
``shared_input_convs_cf``  several convs of one input as ONE channels-first GEMM.
``ConvTranspose1d``     ``__call__`` channels-last / ``cf`` channels-first: one GEMM gives each
                        input frame's ``k*out`` outputs, overlap-added in ``ceil(k/s)`` phases;
                        output length ``(T-1)s + k - left - right`` as PyTorch defines it
                        (``padding=p`` crops p each side; ``"causal"`` crops ``k - s`` on the
                        right, so T frames give ``T*s`` samples).
``DepthwiseConv1d``     groups = channels: a sum of k shifted, scaled copies (no GEMM).
``DepthwiseConvTranspose1d``  transposed, groups = channels: each input frame scales k taps,
                        overlap-added in ``ceil(k/s)`` phases (causal: T frames give T*s).
======================  =====================================================================

Arrays derived here are evaluated at once: a lazy node shared by graphs that two threads
evaluate at the same time crashes MLX (piper/blocked.py runs blocks on two threads).
"""
from __future__ import annotations

from functools import cache

import mlx.core as mx
from mlx import nn

from ttscli.nn.compiled import compile_bounded  # a trace per input length would grow a server

IM2COL_MAX_ROWS = 512


# ----------------------------------------------------------------------------- weight layouts

def _ready(a: mx.array) -> mx.array:
    a = mx.contiguous(a)
    mx.eval(a)
    return a


def tap_weights(w: mx.array) -> mx.array:
    """``[out, in, k]`` -> ``[k, in, out]``: tap j is the right operand ``x_j [T, in] @ W_j``;
    reshaped it is also the im2col weight ``[k*in, out]`` and the strided block weight."""
    return _ready(w.transpose(2, 1, 0))


def output_side_weight(w: mx.array) -> mx.array:
    """``[out, in, k]`` -> ``[in, k*out]`` (tap-major columns)."""
    out, cin, k = w.shape
    return _ready(w.transpose(1, 2, 0).reshape(cin, k * out))


def gemm_weight_cf(w: mx.array) -> mx.array:
    """``[out, in, k]`` -> ``[k*out, in]``, the left operand of a channels-first conv."""
    out, cin, k = w.shape
    return _ready(w.transpose(2, 0, 1).reshape(k * out, cin))


def _phases(w: mx.array, stride: int) -> tuple[mx.array, int]:
    """Transposed weight ``[in, out, k]`` with k zero-padded to ``n * stride``; and n."""
    k = w.shape[2]
    n = -(-k // stride)
    if n * stride != k:
        w = mx.pad(w, [(0, 0), (0, 0), (0, n * stride - k)])
    return w, n


def transposed_weight(w: mx.array, stride: int) -> mx.array:
    """``[in, out, k]`` -> ``[in, n*s*out]``: columns (phase, offset, out) of a channels-last GEMM."""
    w, _ = _phases(w, stride)
    return _ready(w.transpose(0, 2, 1).reshape(w.shape[0], -1))


def transposed_weight_cf(w: mx.array, stride: int) -> mx.array:
    """``[in, out, k]`` -> ``[n*s*out, in]``: rows (phase, offset, out) of a channels-first GEMM."""
    w, _ = _phases(w, stride)
    return _ready(w.transpose(2, 1, 0).reshape(-1, w.shape[0]))


def column(b: mx.array) -> mx.array:
    """A bias ``[C]`` as ``[C, 1]`` for channels-first outputs."""
    return _ready(b.reshape(-1, 1))


# ----------------------------------------------------------------------------- padding

def resolve_padding(padding, kernel_size: int, dilation: int = 1) -> tuple[int, int]:
    """``int | (left, right) | "same" | "causal"`` -> frames added on (left, right)."""
    span = dilation * (kernel_size - 1)
    if padding == "same":
        return span // 2, span - span // 2
    if padding == "causal":
        return span, 0
    if isinstance(padding, int):
        return padding, padding
    left, right = padding
    return int(left), int(right)


def pad_time(x: mx.array, left: int, right: int, mode: str = "zeros", axis: int = -2) -> mx.array:
    """Pad ``axis`` with zeros, a reflection (edge not repeated) or copies of the edge frame."""
    if not (left or right):
        return x
    axis = axis % x.ndim
    if mode == "zeros":
        widths = [(0, 0)] * x.ndim
        widths[axis] = (left, right)
        return mx.pad(x, widths)
    n = x.shape[axis]
    if mode == "replicate":
        idx = [0] * left + list(range(n)) + [n - 1] * right
    elif mode == "reflect":
        if max(left, right) >= n:
            raise ValueError(f"input of length {n} is too short for reflect padding of {max(left, right)}")
        idx = list(range(left, 0, -1)) + list(range(n)) + list(range(n - 2, n - 2 - right, -1))
    else:
        raise ValueError(f"unknown pad mode {mode!r} (zeros, reflect or replicate)")
    return mx.take(x, mx.array(idx, dtype=mx.int32), axis=axis)


class ConvState:
    """The input tail a causal conv needs to continue a stream (None: the stream starts here)."""

    __slots__ = ("tail",)

    def __init__(self):
        self.tail: mx.array | None = None


def with_history(x: mx.array, state: ConvState | None, keep: int) -> mx.array:
    """``x [..., T, C]`` preceded by ``keep`` frames: the state's tail, or zeros at a stream's
    start (exactly the reference's causal zero padding); the state keeps the new tail."""
    if keep == 0:
        return x
    if state is None or state.tail is None:
        tail = mx.zeros((*x.shape[:-2], keep, x.shape[-1]), x.dtype)
    else:
        tail = state.tail
    xin = mx.concatenate([tail, x], axis=-2)
    if state is not None:
        state.tail = xin[..., xin.shape[-2] - keep:, :]
    return xin


# ----------------------------------------------------------------------------- ops (inputs already padded)

def _start(bias: mx.array | None, residual: mx.array | None) -> mx.array | None:
    # bias (and a residual) start the GEMM accumulator: BLAS adds into it, no extra pass
    if residual is None:
        return bias
    return residual if bias is None else residual + bias


def _gemm(acc: mx.array | None, a: mx.array, b: mx.array) -> mx.array:
    return a @ b if acc is None else mx.addmm(acc, a, b)


def _out_len(t: int, k: int, dilation: int, stride: int) -> int:
    return (t - dilation * (k - 1) - 1) // stride + 1


def conv1d_accumulate(x: mx.array, taps: mx.array, bias: mx.array | None = None, dilation: int = 1,
                      stride: int = 1, residual: mx.array | None = None) -> mx.array:
    """Valid conv, channels-last: ``sum_j x[j*d : ...] @ taps[j]`` accumulated by ``addmm``
    (no ``[T, k*in]`` copy). ``taps = tap_weights(w)``. Stride s needs ``d == 1, k % s == 0``:
    the kernel is then k/s taps over blocks of s frames."""
    k, cin, _ = taps.shape
    t_out = _out_len(x.shape[-2], k, dilation, stride)
    step = dilation
    if stride > 1:
        if dilation != 1 or k % stride:
            raise ValueError(f"accumulate needs dilation 1 and k % stride == 0 (k={k}, s={stride}, d={dilation})")
        x = x[..., :(t_out - 1) * stride + k, :]
        x = x.reshape(*x.shape[:-2], -1, stride * cin)
        taps = taps.reshape(k // stride, stride * cin, -1)
        step = 1
    acc = _start(bias, residual)
    for j in range(taps.shape[0]):
        acc = _gemm(acc, x[..., j * step: j * step + t_out, :], taps[j])
    return acc


def conv1d_im2col(x: mx.array, taps: mx.array, bias: mx.array | None = None, dilation: int = 1,
                  stride: int = 1, residual: mx.array | None = None) -> mx.array:
    """Valid conv, channels-last, as ONE GEMM ``[T', k*in] @ [k*in, out]`` over stacked taps."""
    k, cin, cout = taps.shape
    t_out = _out_len(x.shape[-2], k, dilation, stride)
    if k == 1:
        cols = x[..., ::stride, :][..., :t_out, :] if stride > 1 else x
    else:
        span = stride * (t_out - 1) + 1
        cols = mx.concatenate([x[..., j * dilation: j * dilation + span: stride, :] for j in range(k)], axis=-1)
    return _gemm(_start(bias, residual), cols, taps.reshape(k * cin, cout))


@cache
def _tap_sum(k: int, dilation: int, cout: int):
    """Compiled ``bias + residual + sum_i P[..., i*d : i*d + T, i*cout : (i+1)*cout]``: one
    fused pass over the GEMM output instead of k separate adds."""
    def fn(p, bias, residual):
        t_out = p.shape[-2] - dilation * (k - 1)
        y = bias + residual
        for i in range(k):
            y = y + p[..., i * dilation: i * dilation + t_out, i * cout: (i + 1) * cout]
        return y
    return compile_bounded(fn)


def conv1d_output_side(x: mx.array, wmat: mx.array, bias: mx.array | None, k: int, dilation: int = 1,
                       residual: mx.array | None = None) -> mx.array:
    """Valid conv, channels-last, stride 1: ``x @ wmat`` gives every tap's contribution at every
    input frame (``wmat = output_side_weight(w)``), then a compiled shifted sum adds the k taps.
    Faster than im2col at HiFi-GAN's last stage (long T, 32 channels), whose input copy costs
    more than the product itself."""
    cout = wmat.shape[1] // k
    if k == 1:
        y = x @ wmat
        y = y if bias is None else y + bias
        return y if residual is None else y + residual
    zero = mx.zeros((1,), dtype=x.dtype)
    return _tap_sum(k, dilation, cout)(x @ wmat, zero if bias is None else bias,
                                       zero if residual is None else residual)


@cache
def _tap_sum_cf(k: int, dilation: int, cout: int, t0: int = 0, row0: int = 0, trim: int = 0):
    """``_tap_sum`` for channels-first ``P [k*cout, T']``: tap i is a band of rows. ``t0``/``row0``
    select one conv's taps inside a GEMM shared by several convs (``trim`` = extra padding
    on each side of the shared input)."""
    def fn(p, bias, residual):
        t_out = p.shape[1] - 2 * trim - dilation * (k - 1)
        y = bias + residual
        for i in range(k):
            t, r = t0 + i * dilation, row0 + i * cout
            y = y + p[r: r + cout, t: t + t_out]
        return y
    return compile_bounded(fn)


def conv1d_cf(x: mx.array, wmat: mx.array, bias: mx.array, k: int, dilation: int = 1,
              residual: mx.array | None = None) -> mx.array:
    """Valid conv, channels-first: ``x [in, T]``, ``wmat = gemm_weight_cf(w)``, ``bias [out, 1]``
    -> ``[out, T - d(k-1)]`` (+ residual): one GEMM and a compiled sum of its k row bands."""
    if residual is None:
        residual = mx.zeros((1, 1), dtype=x.dtype)
    return _tap_sum_cf(k, dilation, wmat.shape[0] // k)(wmat @ x, bias, residual)


def shared_input_convs_cf(x: mx.array, convs: list[Conv1d], wcat: mx.array,
                          residual: mx.array | None = None) -> list[mx.array]:
    """Several stride-1 convs of one channels-first input ``x [in, T]`` with symmetric padding
    and equal output lengths, as ONE GEMM (``wcat`` = their ``gemm_weight_cf`` stacked on axis
    0; the input padded for the widest) and a tap sum per conv."""
    pad = max(c.pad_left for c in convs)
    p = wcat @ pad_time(x, pad, pad, axis=-1)
    res = mx.zeros((1, 1), dtype=x.dtype) if residual is None else residual
    outs, row = [], 0
    for c in convs:
        cout, k = c.weight.shape[0], c.kernel_size
        fn = _tap_sum_cf(k, c.dilation, cout, pad - c.pad_left, row, pad - c.pad_left)
        outs.append(fn(p, c.bias_cf(), res))
        row += k * cout
    return outs


def conv_transpose1d(x: mx.array, wmat: mx.array, bias: mx.array | None, k: int, stride: int,
                     crop: tuple[int, int] = (0, 0)) -> mx.array:
    """Transposed conv, channels-last: ``x [..., T, in]``, ``wmat = transposed_weight(w, s)``
    -> ``[..., (T-1)s + k - left - right, out]``, i.e. the full output cropped by ``crop``.

    ``x @ wmat`` gives phase j (of n = ceil(k/s)) of every input frame; output block u sums
    phase j of frame u - j. Only the blocks the crop keeps are summed, and zero frames are
    added only where a kept block reaches past the input."""
    t = x.shape[-2]
    n = -(-k // stride)
    cout = wmat.shape[1] // (n * stride)
    y = (x @ wmat).reshape(*x.shape[:-2], t, n, stride, cout)
    full = (t - 1) * stride + k
    left, right = crop
    u0, u1 = left // stride, -(-(full - right) // stride)
    lo, hi = max(0, n - 1 - u0), max(0, u1 - t)
    if lo or hi:
        y = pad_time(y, lo, hi, axis=-4)
    out = None
    for j in range(n):
        v = y[..., u0 - j + lo: u1 - j + lo, j, :, :]
        out = v if out is None else out + v
    out = out.reshape(*x.shape[:-2], (u1 - u0) * stride, cout)
    start = left - u0 * stride
    out = out[..., start: start + full - left - right, :]
    return out if bias is None else out + bias


@cache
def _overlap_add_cf(n: int):
    """Compiled ``sum_j P[j, :, :, n-1-j : ...]`` read as ``[out, T, s]``: the phases add and the
    (stride, time) interleave happens in the same pass, written in channels-first sample order."""
    def fn(p):
        tn = p.shape[-1] - (n - 1)
        y = None
        for j in range(n):
            v = p[j, :, :, n - 1 - j: n - 1 - j + tn].transpose(1, 2, 0)
            y = v if y is None else y + v
        return y
    return compile_bounded(fn)


def conv_transpose1d_cf(x: mx.array, wmat: mx.array, bias: mx.array, k: int, stride: int,
                        crop: tuple[int, int] = (0, 0)) -> mx.array:
    """Transposed conv, channels-first: ``x [in, T]``, ``wmat = transposed_weight_cf(w, s)``,
    ``bias [out, 1]`` -> ``[out, (T-1)s + k - left - right]``. x gets n-1 zero frames each side,
    so every output block sums exactly n shifted phases (faster than the channels-last form
    followed by a transpose)."""
    t, cout = x.shape[1], bias.shape[0]
    n = wmat.shape[0] // (stride * cout)
    p = (wmat @ pad_time(x, n - 1, n - 1, axis=-1)).reshape(n, stride, cout, -1)
    y = _overlap_add_cf(n)(p).reshape(cout, -1)
    left, right = crop
    return y[:, left: (t - 1) * stride + k - right] + bias


def depthwise_conv1d(x: mx.array, taps: mx.array, bias: mx.array | None = None, dilation: int = 1) -> mx.array:
    """Valid per-channel conv, channels-last: ``x [..., T, C]``, ``taps [k, C]`` (= ``w[:, 0].T``)."""
    k = taps.shape[0]
    t_out = x.shape[-2] - dilation * (k - 1)
    y = x[..., :t_out, :] * taps[0]
    for j in range(1, k):
        y = y + x[..., j * dilation: j * dilation + t_out, :] * taps[j]
    return y if bias is None else y + bias


# ----------------------------------------------------------------------------- modules

class DerivedLayouts(nn.Module):
    """A module that keeps layouts derived from its parameters."""

    def _derived(self, name: str, make, src: str = "weight") -> mx.array:
        # rebuilt whenever the source array is replaced (weight loading, dtype casts)
        caches = self.__dict__.setdefault("_derived_cache", {})
        arr = self[src]
        hit = caches.get(name)
        if hit is None or hit[0] is not arr:
            hit = caches[name] = (arr, make(arr))
        return hit[1]

    def bias_cf(self) -> mx.array:
        """The bias as a column ``[out, 1]`` (a zero ``[1, 1]`` without one)."""
        if "bias" not in self:
            return mx.zeros((1, 1), dtype=self.weight.dtype)
        return self._derived("bias_cf", column, "bias")

    def _bias(self) -> mx.array | None:
        return self.get("bias")


class Conv1d(DerivedLayouts):
    """``nn.Conv1d`` (PyTorch semantics), weight ``[out, in, k]``; forms in the module docstring."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 dilation: int = 1, padding=0, bias: bool = True, pad_mode: str = "zeros"):
        super().__init__()
        self.weight = mx.zeros((out_channels, in_channels, kernel_size))
        if bias:
            self.bias = mx.zeros((out_channels,))
        self.kernel_size, self.stride, self.dilation = kernel_size, stride, dilation
        self.pad_left, self.pad_right = resolve_padding(padding, kernel_size, dilation)
        self.causal = padding == "causal"
        self.pad_mode = pad_mode

    def make_state(self) -> ConvState | None:
        """A stream's state (causal convs only; None where there is nothing to carry)."""
        return ConvState() if self.causal and self.pad_left else None

    def pad(self, x: mx.array, state: ConvState | None = None, axis: int = -2) -> mx.array:
        if self.causal and state is not None:
            return with_history(x, state, self.pad_left)
        return pad_time(x, self.pad_left, self.pad_right, self.pad_mode, axis)

    def taps(self) -> mx.array:
        return self._derived("taps", tap_weights)

    def __call__(self, x: mx.array, residual: mx.array | None = None,
                 state: ConvState | None = None) -> mx.array:
        x = self.pad(x, state)
        k, d, s = self.kernel_size, self.dilation, self.stride
        if k > 1 and _out_len(x.shape[-2], k, d, s) <= IM2COL_MAX_ROWS and self.weight.shape[0] > 1:
            # few rows (streaming chunks, low frame rates): the GEMM is bound by reading the
            # weights, and one [T, k*in] x [k*in, out] product beats k of them; for long
            # inputs the k-fold input copy costs more
            return conv1d_im2col(x, self.taps(), self._bias(), d, s, residual)
        if s > 1 and (d != 1 or k % s):
            return conv1d_im2col(x, self.taps(), self._bias(), d, s, residual)
        return conv1d_accumulate(x, self.taps(), self._bias(), d, s, residual)

    def accumulate(self, x: mx.array, residual: mx.array | None = None,
                   state: ConvState | None = None) -> mx.array:
        return conv1d_accumulate(self.pad(x, state), self.taps(), self._bias(), self.dilation,
                                 self.stride, residual)

    def im2col(self, x: mx.array, residual: mx.array | None = None,
               state: ConvState | None = None) -> mx.array:
        return conv1d_im2col(self.pad(x, state), self.taps(), self._bias(), self.dilation,
                             self.stride, residual)

    def output_side(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        """Stride 1 only (see :func:`conv1d_output_side`)."""
        return conv1d_output_side(self.pad(x), self.weight_output_side(), self._bias(),
                                  self.kernel_size, self.dilation, residual)

    def weight_output_side(self) -> mx.array:
        """``[in, k*out]``; for k = 1 the plain ``[in, out]`` matrix of a pointwise conv."""
        return self._derived("output_side", output_side_weight)

    def cf(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        """Channels-first ``x [in, T]`` -> ``[out, T']``, stride 1."""
        return conv1d_cf(self.pad(x, axis=-1), self.weight_cf(), self.bias_cf(), self.kernel_size,
                         self.dilation, residual)

    def weight_cf(self) -> mx.array:
        return self._derived("cf", gemm_weight_cf)


class ConvTranspose1d(DerivedLayouts):
    """``nn.ConvTranspose1d`` (PyTorch semantics), weight ``[in, out, k]``. ``padding``: int
    (cropped from both ends), ``(left, right)`` or ``"causal"`` (``k - stride`` cropped on the
    right, left context from a :class:`ConvState` when given)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding=0, bias: bool = True):
        super().__init__()
        self.weight = mx.zeros((in_channels, out_channels, kernel_size))
        if bias:
            self.bias = mx.zeros((out_channels,))
        self.kernel_size, self.stride = kernel_size, stride
        self.causal = padding == "causal"
        self.crop = (0, max(0, kernel_size - stride)) if self.causal else resolve_padding(padding, 1)
        # input frames that reach one block of ``stride`` outputs
        self.phases = -(-kernel_size // stride)

    @property
    def padding(self) -> int:
        return self.crop[0]

    def make_state(self) -> ConvState | None:
        return ConvState() if self.causal and self.phases > 1 else None

    def __call__(self, x: mx.array, state: ConvState | None = None) -> mx.array:
        """Channels-last ``x [..., T, in]`` -> ``[..., T', out]``."""
        wmat = self._derived("gemm", lambda w: transposed_weight(w, self.stride))
        k, s = self.kernel_size, self.stride
        if self.causal:
            # history frames instead of cropping: the blocks kept are exactly those every
            # phase reaches, so the sum needs no zero padding
            h = self.phases - 1
            x = with_history(x, state, h)
            return conv_transpose1d(x, wmat, self._bias(), k, s, (h * s, k - s))
        return conv_transpose1d(x, wmat, self._bias(), k, s, self.crop)

    def cf(self, x: mx.array) -> mx.array:
        """Channels-first ``x [in, T]`` -> ``[out, T']`` (no stream state)."""
        wmat, bias = self.gemm_cf()
        return conv_transpose1d_cf(x, wmat, bias, self.kernel_size, self.stride, self.crop)

    def gemm_cf(self) -> tuple[mx.array, mx.array]:
        """(``transposed_weight_cf`` of the weight, bias as a column), kept per weight."""
        return self._derived("cf", lambda w: transposed_weight_cf(w, self.stride)), self.bias_cf()


class DepthwiseConv1d(DerivedLayouts):
    """Per-channel conv (groups = channels), weight ``[C, 1, k]``, channels-last."""

    def __init__(self, channels: int, kernel_size: int, dilation: int = 1, padding=0, bias: bool = True):
        super().__init__()
        self.weight = mx.zeros((channels, 1, kernel_size))
        if bias:
            self.bias = mx.zeros((channels,))
        self.kernel_size, self.dilation = kernel_size, dilation
        self.pad_left, self.pad_right = resolve_padding(padding, kernel_size, dilation)
        self.causal = padding == "causal"

    def make_state(self) -> ConvState | None:
        return ConvState() if self.causal and self.pad_left else None

    def taps(self) -> mx.array:
        """``[k, C]``: tap j scales every channel of frame ``t + j*d``."""
        return self._derived("taps", lambda w: _ready(w[:, 0, :].T))

    def __call__(self, x: mx.array, state: ConvState | None = None) -> mx.array:
        if self.causal and state is not None:
            x = with_history(x, state, self.pad_left)
        else:
            x = pad_time(x, self.pad_left, self.pad_right)
        return depthwise_conv1d(x, self.taps(), self._bias(), self.dilation)


class DepthwiseConvTranspose1d(DerivedLayouts):
    """Per-channel transposed conv (groups = channels), weight ``[C, 1, k]``, channels-last,
    causal: ``k - stride`` cropped on the right, so T frames give ``T*stride`` outputs, and a
    :class:`ConvState` carries the frames a stream's next block still reaches (as the causal
    :class:`ConvTranspose1d`). No GEMM: output block u sums phase j of frame u - j, each phase a
    per-channel scale of the frame (a dense [C, C, k] weight would cost C times the work)."""

    def __init__(self, channels: int, kernel_size: int, stride: int, bias: bool = False):
        super().__init__()
        self.weight = mx.zeros((channels, 1, kernel_size))
        if bias:
            self.bias = mx.zeros((channels,))
        self.kernel_size, self.stride = kernel_size, stride
        self.phases = -(-kernel_size // stride)

    def make_state(self) -> ConvState | None:
        return ConvState() if self.phases > 1 else None

    def taps(self) -> mx.array:
        """``[phases, stride, C]``: phase j's scale of output offset r (zero past the kernel)."""
        def make(w):
            k, s, n = self.kernel_size, self.stride, self.phases
            t = w[:, 0, :].T
            if n * s > k:
                t = mx.concatenate([t, mx.zeros((n * s - k, t.shape[1]), t.dtype)], axis=0)
            return _ready(t.reshape(n, s, -1))
        return self._derived("taps", make)

    def __call__(self, x: mx.array, state: ConvState | None = None) -> mx.array:
        """``x [..., T, C]`` -> ``[..., T*stride, C]``."""
        h = self.phases - 1
        xin = with_history(x, state, h)
        t = x.shape[-2]
        taps = self.taps()
        out = None
        for j in range(self.phases):
            v = xin[..., h - j: h - j + t, None, :] * taps[j]
            out = v if out is None else out + v
        out = out.reshape(*x.shape[:-2], t * self.stride, x.shape[-1])
        return out if "bias" not in self else out + self.bias
