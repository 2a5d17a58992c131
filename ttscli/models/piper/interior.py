"""HiFi-GAN on an interior time block: "valid" convolutions, each GEMM's epilogue one fused pass.

A time block whose halo lies inside the utterance needs no zero padding: every conv can drop
the frames its taps cannot reach (the halo covers them), so no ``pad`` copy is made. Its tap
sum is then the only elementwise pass per conv and also writes what the next GEMM reads
(``leaky_relu`` of the new residual stream), the stage mean and the next activation. MLX's
CPU elementwise kernels run on one thread at memory speed, so each pass saved is time saved.
Blocks that touch either end of the utterance keep the zero-padded path (decoder.py).

Channels-first throughout: ``[C, T]`` with each conv as ``W [K*Cout, Cin] @ x`` followed by a
sum of K row bands shifted in time (see ttscli/nn/conv.py).
"""
from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from ttscli.nn.compiled import compile_bounded
from ttscli.nn.fastmath import fast_tanh



def _leaky(x: mx.array, slope: float) -> mx.array:
    return mx.maximum(x, slope * x)


@lru_cache(maxsize=None)
def _taps(k: int, dilation: int, cout: int, row0: int, t0: int, act: float | None, n_mean: int = 0):
    """Compiled epilogue of a valid conv whose GEMM output ``p`` holds its taps from row ``row0``:
    ``h = residual + bias + sum_i p[row0 + i*cout : ..., t0 + i*d : ... + T]`` with T the
    residual's length. ``act``: also return ``leaky_relu(h, act)``. ``n_mean``: ``h`` is the
    last of ``n_mean`` resblock outputs whose others come as extra inputs; return only
    ``leaky_relu(mean, act)``."""
    def fn(p, bias, residual, *others):
        t_out = residual.shape[1]
        h = residual + bias
        for i in range(k):
            t, r = t0 + i * dilation, row0 + i * cout
            h = h + p[r: r + cout, t: t + t_out]
        if n_mean:
            m = sum(others, h) * (1.0 / n_mean)
            return _leaky(m, act)
        if act is None:
            return h
        return h, _leaky(h, act)
    return compile_bounded(fn)


@lru_cache(maxsize=None)
def _overlap_add(n: int, act: float):
    """Compiled valid overlap-add of a transposed conv's GEMM output read as ``[n, s, C, T]``
    (output block u sums phase j of frame u + n-1-j), written in sample order, plus bias;
    returns the samples and their ``leaky_relu``."""
    def fn(p, bias):                                 # bias [C, 1, 1]
        tn = p.shape[-1] - (n - 1)
        y = bias
        for j in range(n):
            y = y + p[j, :, :, n - 1 - j: n - 1 - j + tn].transpose(1, 2, 0)
        return y, _leaky(y, act)
    return compile_bounded(fn)


@lru_cache(maxsize=None)
def _post(k: int):
    """conv_post's epilogue (one output channel, no bias) fused with the waveform's tanh."""
    def fn(p):
        t_out = p.shape[1] - (k - 1)
        y = p[0:1, 0:t_out]
        for i in range(1, k):
            y = y + p[i: i + 1, i: i + t_out]
        return fast_tanh(y)
    return compile_bounded(fn)


def upsample(up, v: mx.array, act: float) -> tuple[mx.array, mx.array, int]:
    """Transposed conv ``up`` on activated frames ``v [Cin, t]`` without edge padding.

    Returns (x, leaky_relu(x, act), first): the ``(t - n + 1) * s`` samples whose input frames
    all lie in ``v``; ``first`` = index of x's first sample in the zero-padded output
    (``up.cf``'s) of the same ``v``, i.e. ``(n - 1) * s - padding``."""
    wmat, bias = up.gemm_cf()
    s, cout = up.stride, bias.shape[0]
    n = wmat.shape[0] // (s * cout)
    p = (wmat @ v).reshape(n, s, cout, -1)
    x, xl = _overlap_add(n, act)(p, bias.reshape(cout, 1, 1))
    return x.reshape(cout, -1), xl.reshape(cout, -1), (n - 1) * s - up.padding


def stage(gen, i: int, x: mx.array, xl: mx.array, act: float | None) -> tuple[mx.array, int]:
    """Resblock stage ``i`` (ResBlock2: ``h += conv(leaky_relu(h))`` per conv, mean over the
    stage's resblocks) on ``x [C, T]`` with ``xl = leaky_relu(x, 0.1)``, valid convs only.

    Returns (``leaky_relu(mean, act)``, offset of its first frame in ``x``); with ``act`` None
    the last stage's conv_post and tanh follow (output: waveform ``[1, T']``).
    """
    nk = gen.num_kernels
    blocks = gen.resblocks[i * nk:(i + 1) * nk]
    firsts = [b.convs[0] for b in blocks]
    c_out = x.shape[0]
    p = gen._shared_weight(i, firsts) @ xl
    t = x.shape[1]
    halo = max(sum(c.pad_left for c in b.convs) for b in blocks)
    finals, row = [], 0
    for j, b in enumerate(blocks):
        c = b.convs[0]
        k = c.kernel_size
        pad = c.pad_left
        h, hl = _taps(k, c.dilation, c_out, row, 0, 0.1)(p, c.bias_cf(), x[:, pad: t - pad])
        row += k * c_out
        off = pad                                   # h's first frame, in x's frames
        last_block = j == nk - 1
        for ci, c in enumerate(b.convs[1:], start=1):
            k, pad = c.kernel_size, c.pad_left
            q = c.weight_cf() @ hl
            res = h[:, pad: h.shape[1] - pad]
            off += pad
            if ci < len(b.convs) - 1:
                h, hl = _taps(k, c.dilation, c_out, 0, 0, 0.1)(q, c.bias_cf(), res)
            elif not last_block:
                h = _taps(k, c.dilation, c_out, 0, 0, None)(q, c.bias_cf(), res)
            else:
                # the mean of the stage's resblock outputs over the frames all of them cover
                res = res[:, halo - off: res.shape[1] - (halo - off)]
                others = [f[:, halo - o: f.shape[1] - (halo - o)] for f, o in finals]
                k0 = halo - off
                out = _taps(k, c.dilation, c_out, 0, k0, 0.01 if act is None else act, nk)(
                    q, c.bias_cf(), res, *others)
                break
        else:
            finals.append((h, off))
            continue
    if act is not None:
        return out, halo
    post = gen.conv_post
    q = post.weight_cf() @ out
    return _post(post.kernel_size)(q), halo + post.pad_left
