"""exp, tanh, sigmoid, SiLU, tanh-GELU and softmax from multiply-adds, for MLX's CPU backend.

MLX's CPU exp/tanh/sigmoid run as scalar loops, while multiply-adds run vectorised. Written as a
few fused multiply-adds inside ``mx.compile`` they are several times faster (docs/benchmarks.md#code-comment-figures),
and ``fast_exp`` is also the more
accurate of the two (max relative error vs float64: 9.6e-8 here, MLX's exp 3.4e-6).
On GPUs MLX's own kernels are fast: use these only where ``on_cpu()`` says so.
"""
from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn

from ttscli.nn.compiled import compile_bounded

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693145751953125          # few mantissa bits: n * _LN2_HI is exact for |n| < 2^11
_LN2_LO = 1.4286068203094173e-06
# Taylor terms of exp(r) for |r| <= ln2/2: truncation error r^8/8! < 6e-9
_EXP = (1.0, 1.0, 1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040)

# tanh(x) ~= x P(v) / Q(v), v = (x/9)^2, |x| clipped to 9: a rational least-squares fit made for
# this project, max abs error 3.6e-7 in float32.
_TANH_P = (0.9999999996911603, 11.094444351379213, 25.518693848901034, 15.107527174713477,
           1.358830180057633, -0.04498538963486425)
_TANH_Q = (1.0, 38.09444402537362, 179.26873513749476, 211.2830701080013, 56.66435814736744)


def on_cpu() -> bool:
    return mx.default_device().type == mx.cpu


def estrin(coefs, v, v2, v4):
    """``horner(coefs, v)`` (up to degree 7) given ``v2 = v*v``, ``v4 = v2*v2``, as a
    shallow tree. MLX fuses at most 11 ops deep into one compiled CPU kernel; a deeper
    Horner chain splits into several kernels, each a pass over memory."""
    def pair(i):                                   # c[i] + c[i+1] v, or c[i]
        return coefs[i] + coefs[i + 1] * v if i + 1 < len(coefs) else coefs[i]

    lo = pair(0) if len(coefs) <= 2 else pair(0) + v2 * pair(2)
    if len(coefs) <= 4:
        return lo
    return lo + v4 * (pair(4) if len(coefs) <= 6 else pair(4) + v2 * pair(6))


def horner(coefs, v):
    """coefs[0] + coefs[1] v + coefs[2] v^2 + ..."""
    r = coefs[-1]
    for c in coefs[-2::-1]:
        r = r * v + c
    return r


def clamp(x: mx.array, bound: float) -> mx.array:
    """``clip(x, -bound, bound)`` (exact), as a select: inside a compiled kernel mx.clip
    is several times slower than this select."""
    return mx.where(mx.abs(x) > bound, bound * mx.sign(x), x)


def fast_exp(x: mx.array, zero_below: float = -87.0) -> mx.array:
    """exp(x) = 2^n exp(r), n = round(x / ln 2); 2^n built from its float32 exponent bits.

    Below ``zero_below`` (>= -87) the result is exactly 0: exp(-87) = 1.6e-38 is near the
    denormal range, and denormals make a later GEMM (attention's probabilities @ values) an
    order of magnitude slower. -inf, e.g. a masked score, gives 0.
    """
    c = mx.clip(x, -87.0, 88.0)
    n = mx.floor(c * _LOG2E + 0.5)
    r = c - n * _LN2_HI - n * _LN2_LO
    two_n = mx.view(mx.left_shift(n.astype(mx.int32) + 127, 23), mx.float32)
    return mx.where(x > zero_below, horner(_EXP, r) * two_n, 0.0)


@lru_cache(maxsize=None)
def _tanh_coefs(scale: float, out_scale: float) -> tuple[tuple, tuple]:
    s = scale * scale / 81.0
    return (tuple(c * s ** i * scale * out_scale for i, c in enumerate(_TANH_P)),
            tuple(c * s ** i for i, c in enumerate(_TANH_Q)))


def fast_tanh(x: mx.array, scale: float = 1.0, out_scale: float = 1.0) -> mx.array:
    """``out_scale * tanh(scale * x)``, the scales folded into the coefficients.

    The fit's v = (x/9)^2 folded in too, Estrin's scheme and clamp() keep it one compiled
    kernel, about twice as fast as the plain polynomial at the same max abs error (3.6e-7). One
    more op after it inside the same mx.compile already splits the kernel."""
    p, q = _tanh_coefs(float(scale), float(out_scale))
    x = clamp(x, 9.0 / scale)
    v = x * x
    v2 = v * v
    v4 = v2 * v2
    return x * estrin(p, v, v2, v4) / estrin(q, v, v2, v4)


def fast_sigmoid(x: mx.array) -> mx.array:
    return 1.0 / (1.0 + fast_exp(-x))


@compile_bounded  # not shapeless: fast_exp reinterprets bits (a View); one trace per shape grows a server
def swiglu(gate: mx.array, up: mx.array) -> mx.array:
    """silu(gate) * up, the SwiGLU product."""
    return gate * fast_sigmoid(gate) * up


@compile_bounded
def softmax(x: mx.array) -> mx.array:
    """Softmax over the last axis (masked entries may be -inf).

    Terms below exp(-80) relative to the largest are dropped (exactly 0), so that dividing by
    the sum cannot make denormals; they would change the sum by < 2e-35 per term.
    """
    e = fast_exp(x - mx.max(x, axis=-1, keepdims=True), zero_below=-80.0)
    return e / mx.sum(e, axis=-1, keepdims=True)


_GELU_C = 0.7978845608028654             # sqrt(2 / pi)


@compile_bounded
def _gelu_tanh_cpu(x: mx.array) -> mx.array:
    return 0.5 * x * (1.0 + fast_tanh(x + 0.044715 * x * x * x, scale=_GELU_C))


def gelu_tanh(x: mx.array) -> mx.array:
    """The tanh approximation of GELU (torch's ``gelu(approximate="tanh")``, ``nn.gelu_approx``).
    On the CPU through :func:`fast_tanh` in one compiled kernel, several times faster than MLX's
    scalar tanh; max abs error ~1e-6 against it for |x| < 10."""
    return _gelu_tanh_cpu(x) if on_cpu() else nn.gelu_approx(x)
