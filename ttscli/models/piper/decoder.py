"""VITS posterior flow (inference direction, channels-last ``[1, T, C]``) and the HiFi-GAN
generator (channels-first ``[C, T]`` after conv_pre, in time blocks)."""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from ttscli.nn.fastmath import fast_tanh  # MLX's CPU tanh is a scalar loop
from ttscli.nn.compiled import compile_bounded, compile_shapeless  # traces bounded: a server sees every length

from . import interior as interior_
from .blocked import _BlasThreads, blocked, blocked_chain
from ttscli.nn.conv import ConvTranspose1d, gemm_weight_cf, shared_input_convs_cf

from .conv import Conv1d


@compile_shapeless
def _mean3(a, b, c):
    return (a + b + c) / 3


def _mean(xs: list[mx.array]) -> mx.array:
    if len(xs) == 3:
        return _mean3(*xs)
    return sum(xs[1:], xs[0]) / len(xs)


_tanh = compile_bounded(fast_tanh)  # not shapeless: fast_tanh reinterprets bits (a View)


@compile_shapeless
def _gate_product(ta: mx.array, hb: mx.array) -> mx.array:
    return ta * (0.5 + hb)


def _gate(a: mx.array, b: mx.array) -> mx.array:
    """WaveNet's tanh(a) * sigmoid(b), with sigmoid(b) = 1/2 + tanh(b/2) / 2.

    Three compiled kernels: each tanh is as deep as MLX fuses into one CPU kernel, and one
    graph of all of it split badly (the three kernels take less than half its time)."""
    return _gate_product(_tanh(a), _tanh(b, 0.5, 0.5))


_BLOCK_CHANNELS = 64


@compile_bounded
def _res_skip(x: mx.array, out: mx.array, r: mx.array) -> tuple[mx.array, mx.array]:
    n = x.shape[-1]
    return x + r[:, :n], out + r[:, n:]


class WN(nn.Module):
    """Non-causal WaveNet: gated tanh/sigmoid layers with residual and skip outputs."""

    def __init__(self, hidden: int, kernel_size: int, dilation_rate: int, n_layers: int):
        super().__init__()
        self.hidden = hidden
        self.in_layers = [Conv1d(hidden, 2 * hidden, kernel_size, dilation_rate ** i) for i in range(n_layers)]
        self.res_skip_layers = [Conv1d(hidden, 2 * hidden if i < n_layers - 1 else hidden, 1)
                                for i in range(n_layers)]

    def __call__(self, x: mx.array) -> mx.array:
        """``x [1, T, C]`` -> skip sum ``[1, T, C]``. The in-layer convs run as one GEMM per
        tap, accumulated (``Conv1d.accumulate``): faster for the flow than one im2col GEMM per
        conv, and the output-side form was slower still."""
        n = self.hidden
        x = x[0]
        out = None
        for i, (inl, rs) in enumerate(zip(self.in_layers, self.res_skip_layers)):
            h = inl.accumulate(x)
            acts = _gate(h[:, :n], h[:, n:])
            r = mx.addmm(rs.bias, acts, rs.weight_output_side())
            if i == len(self.in_layers) - 1:
                out = r if out is None else out + r
            elif out is None:
                x, out = x + r[:, :n], r[:, n:]
            else:
                x, out = _res_skip(x, out, r)
        return out[None]


class ResidualCouplingLayer(nn.Module):
    """Mean-only affine coupling: the second half is shifted by a WaveNet of the first."""

    def __init__(self, channels: int, hidden: int, kernel_size: int, dilation_rate: int, n_layers: int):
        super().__init__()
        self.half = channels // 2
        self.pre = Conv1d(self.half, hidden, 1)
        self.enc = WN(hidden, kernel_size, dilation_rate, n_layers)
        self.post = Conv1d(hidden, self.half, 1)

    def reverse(self, x: mx.array) -> mx.array:
        x0, x1 = x[..., : self.half], x[..., self.half:]
        m = self.post(self.enc(self.pre(x0)))
        return mx.concatenate([x0, x1 - m], axis=-1)


class ResidualCouplingBlock(nn.Module):
    """``flows`` alternates coupling layers (even) and channel flips (odd, no weights)."""

    def __init__(self, channels: int, hidden: int, kernel_size: int, dilation_rate: int,
                 n_layers: int, n_flows: int):
        super().__init__()
        self.flows = []
        for _ in range(n_flows):
            self.flows += [ResidualCouplingLayer(channels, hidden, kernel_size, dilation_rate, n_layers), {}]

    def reverse(self, z: mx.array) -> mx.array:
        for flow in reversed(self.flows):
            z = flow.reverse(z) if isinstance(flow, ResidualCouplingLayer) else z[..., ::-1]
        return z


class ResBlock1(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilations: list[int]):
        super().__init__()
        self.convs1 = [Conv1d(channels, channels, kernel_size, d) for d in dilations]
        self.convs2 = [Conv1d(channels, channels, kernel_size, 1) for _ in dilations]

    first_takes_residual = False

    def children_convs(self) -> list[Conv1d]:
        return self.convs1 + self.convs2

    def first(self) -> Conv1d:
        return self.convs1[0]

    def finish(self, h: mx.array, x: mx.array) -> mx.array:
        """Rest of the block on channels-first ``[C, T]`` arrays, given the first conv's output
        ``h`` on ``leaky_relu(x)``."""
        x = self.convs2[0].cf(nn.leaky_relu(h, 0.1), residual=x)
        for c1, c2 in zip(self.convs1[1:], self.convs2[1:]):
            x = c2.cf(nn.leaky_relu(c1.cf(nn.leaky_relu(x, 0.1)), 0.1), residual=x)
        return x


class ResBlock2(nn.Module):
    def __init__(self, channels: int, kernel_size: int, dilations: list[int]):
        super().__init__()
        self.convs = [Conv1d(channels, channels, kernel_size, d) for d in dilations]

    first_takes_residual = True

    def children_convs(self) -> list[Conv1d]:
        return list(self.convs)

    def first(self) -> Conv1d:
        return self.convs[0]

    def finish(self, h: mx.array, x: mx.array) -> mx.array:
        """Rest of the block on channels-first ``[C, T]`` arrays, given
        ``h = x + convs[0](leaky_relu(x))``."""
        for c in self.convs[1:]:
            h = c.cf(nn.leaky_relu(h, 0.1), residual=h)
        return h


class Generator(nn.Module):
    # True: the upsampling stages share one two-thread block queue (blocked_chain); False:
    # stage by stage (kept for A/B runs)
    chain = True
    def __init__(self, in_channels: int, resblock: str, resblock_kernel_sizes: list[int],
                 resblock_dilation_sizes: list[list[int]], upsample_rates: list[int],
                 upsample_initial_channel: int, upsample_kernel_sizes: list[int]):
        super().__init__()
        self.num_kernels = len(resblock_kernel_sizes)
        self.conv_pre = Conv1d(in_channels, upsample_initial_channel, 7)
        block = ResBlock1 if str(resblock) == "1" else ResBlock2
        self.ups = []
        self.resblocks = []
        ch = upsample_initial_channel
        for u, k in zip(upsample_rates, upsample_kernel_sizes):
            self.ups.append(ConvTranspose1d(ch, ch // 2, k, u, (k - u) // 2))
            ch //= 2
            for rk, rd in zip(resblock_kernel_sizes, resblock_dilation_sizes):
                self.resblocks.append(block(ch, rk, rd))
        self.conv_post = Conv1d(ch, 1, 7, bias=False)

    def _stage_cf(self, i: int, x: mx.array) -> mx.array:
        """Mean of the stage's resblocks on channels-first ``x [C, T]``. Their first convs all
        read ``leaky_relu(x)``, so they run as one GEMM ``W [K*Cout, Cin] @ x`` (one activation
        pass, one pad, wider product), each tap a band of contiguous rows (faster than
        channels-last at 32-64 channels)."""
        nk = self.num_kernels
        blocks = self.resblocks[i * nk:(i + 1) * nk]
        firsts = [b.first() for b in blocks]
        res = x if blocks[0].first_takes_residual else None
        hs = shared_input_convs_cf(nn.leaky_relu(x, 0.1), firsts, self._shared_weight(i, firsts), res)
        return _mean([b.finish(h, x) for b, h in zip(blocks, hs)])

    def _shared_weight(self, i: int, convs: list) -> mx.array:
        """The stage's first convs' ``gemm_weight_cf`` stacked, kept per weight (rebuilt
        whenever a weight array is replaced, e.g. by weight loading)."""
        cache = self.__dict__.setdefault("_shared_cache", {})
        hit = cache.get(i)
        if hit is None or any(a is not c.weight for a, c in zip(hit[0], convs)):
            w = mx.concatenate([gemm_weight_cf(c.weight) for c in convs], axis=0)
            mx.eval(w)
            hit = cache[i] = (tuple(c.weight for c in convs), w)
        return hit[1]

    def _halo(self, i: int) -> int:
        """Frames each side that influence one output frame of stage ``i`` (plus conv_post)."""
        nk = self.num_kernels
        halo = max(sum(c.pad_left for c in rb.children_convs()) for rb in self.resblocks[i * nk:(i + 1) * nk])
        return halo + (self.conv_post.pad_left if i == len(self.ups) - 1 else 0)

    def _up_stage(self, i: int, v: mx.array, interior: bool = False) -> tuple[mx.array, int]:
        """Upsampling ``i`` and its resblock stage on the previous stage's activated output
        ``v`` (``leaky_relu(x, 0.1)``): (that activation of this stage's output, or from the
        last stage the waveform; index of its first sample in the full output for ``v``).

        ``interior``: ``v`` carries a full halo on both sides (no zero padding anywhere), so
        the fused valid-convolution path of interior.py applies."""
        last = i == len(self.ups) - 1
        if interior and self._interior_ok():
            x, xl, first = interior_.upsample(self.ups[i], v, 0.1)
            out, off = interior_.stage(self, i, x, xl, None if last else 0.1)
            return out, first + off
        x = self._stage_cf(i, self.ups[i].cf(v))
        if last:
            return fast_tanh(self.conv_post.cf(nn.leaky_relu(x, 0.01))), 0
        return nn.leaky_relu(x, 0.1), 0

    def _warm_caches(self) -> None:
        """Build every derived weight layout the stages use, here: the worker thread cannot
        evaluate arrays still lazy on this thread's stream (weights just replaced), and with
        one queue over all stages it may take any stage's first block."""
        nk = self.num_kernels
        for i, up in enumerate(self.ups):
            up.gemm_cf()
            blocks = self.resblocks[i * nk:(i + 1) * nk]
            self._shared_weight(i, [b.first() for b in blocks])
            for c in (c for b in blocks for c in b.children_convs()):
                c.weight_cf()
                c.bias_cf()
        self.conv_post.weight_cf()
        self.conv_post.bias_cf()

    def _interior_ok(self) -> bool:
        # the fused path is written for ResBlock2 with at least two convs per resblock
        return all(isinstance(b, ResBlock2) and len(b.convs) > 1 for b in self.resblocks)

    def _up_halo(self, i: int) -> int:
        """Input frames each side that influence one output frame of ``_up_stage(i)``: the
        stage's halo in input frames plus the transposed conv's reach (ceil(K/s) frames)."""
        up = self.ups[i]
        k = up.kernel_size
        return -(-self._halo(i) // up.stride) + -(-k // up.stride)

    def __call__(self, x: mx.array, block: int = 2048) -> mx.array:
        """``[1, T, C]`` latent frames -> ``[1, T * prod(upsample_rates)]`` audio in [-1, 1].

        Each upsampling and its resblock stage (long, few channels, memory-bound) run together
        in overlapping time blocks so their activations stay in cache, which saves the decoder a
        good part of its CPU time. Each block carries a halo as wide as the receptive
        field, so the result equals the unblocked one exactly.
        """
        # the latents first, with the BLAS's own threads (the flow's GEMMs use both cores);
        # then single-threaded BLAS for the whole decoder, conv_pre included, instead of
        # toggled per stage
        mx.eval(x)
        with _BlasThreads(1):
            # channels-first [C, T] (the GEMMs are W @ x, each conv tap a band of contiguous
            # rows); conv_pre (accumulated per-tap GEMMs, the faster form on one thread) is
            # read as a transposed view
            x = nn.leaky_relu(self.conv_pre.accumulate(x[0]).T, 0.1)
            self._warm_caches()
            stages = []
            for i, up in enumerate(self.ups):
                # ``block`` output samples per block at 64 channels, in inverse proportion to
                # the channels elsewhere: a block's GEMM outputs must stay in L2 (2 MiB a core
                # on the project's CPU; blocks that overflow it cost a multiple per sample)
                blk = max(1, block * _BLOCK_CHANNELS // up.bias.shape[0])
                stages.append((lambda v, inner, i=i: self._up_stage(i, v, inner), self._up_halo(i),
                               max(1, blk // up.stride), up.stride))
            if self.chain:
                x = blocked_chain(stages, x)
            else:
                for st in stages:
                    x = blocked(st[0], x, *st[1:])
            mx.eval(x)
        return x
