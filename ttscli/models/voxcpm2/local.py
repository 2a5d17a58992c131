"""The local stacks around the LM: the patch encoder (LocEnc) and the diffusion transformer
(LocDiT), both bidirectional MiniCPM stacks over one patch, named as the checkpoint's
``feat_encoder.*`` and ``feat_decoder.estimator.*``."""
from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

from ttscli.lm.config import LMArgs
from ttscli.lm.model import DecoderLM


class LocEnc(nn.Module):
    """Patches ``[B, T, P, D]`` -> one vector per patch ``[B, T, H]``: a learnt token in front of
    the projected frames, the stack's output at that token."""

    def __init__(self, a: LMArgs, feat_dim: int):
        super().__init__()
        self.special_token = mx.zeros((1, 1, 1, a.hidden_size))
        self.in_proj = nn.Linear(feat_dim, a.hidden_size)
        self.encoder = DecoderLM(a, embed_tokens=False)
        # the same network on another runtime (onnx_local.OnnxLocEnc), called in its place
        self.external = None

    def __call__(self, x: mx.array) -> mx.array:
        if self.external is not None:
            return self.external(x)
        B, T, P, _ = x.shape
        h = self.in_proj(x)
        special = mx.broadcast_to(self.special_token, (B, T, 1, h.shape[-1]))
        h = mx.concatenate([special, h], axis=2).reshape(B * T, P + 1, -1)
        return self.encoder(input_embeddings=h, causal=False)[:, 0].reshape(B, T, -1)


def timestep_embedding(t: mx.array, dim: int, scale: float = 1000.0) -> mx.array:
    """Sinusoidal embedding of ``t [N]`` -> ``[N, dim]``: sin half, then cos half."""
    half = dim // 2
    freqs = mx.exp(mx.arange(half, dtype=mx.float32) * -(math.log(10000) / (half - 1)))
    arg = scale * t[:, None] * freqs[None]
    return mx.concatenate([mx.sin(arg), mx.cos(arg)], axis=-1)


class TimestepEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(dim, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.linear_2(nn.silu(self.linear_1(x)))


class LocDiT(nn.Module):
    """The velocity of one patch: the sequence [mu (2 tokens), time, condition patch, noisy
    patch] through a bidirectional stack, read back at the noisy patch's positions."""

    def __init__(self, a: LMArgs, feat_dim: int):
        super().__init__()
        h = a.hidden_size
        self.in_proj = nn.Linear(feat_dim, h)
        self.cond_proj = nn.Linear(feat_dim, h)
        self.out_proj = nn.Linear(h, feat_dim)
        self.time_mlp = TimestepEmbedding(h)
        self.delta_time_mlp = TimestepEmbedding(h)
        self.decoder = DecoderLM(a, embed_tokens=False)

    def __call__(self, x: mx.array, mu: mx.array, t: mx.array, cond: mx.array, dt: mx.array) -> mx.array:
        """``x``, ``cond [N, P, D]``, ``mu [N, 2H]``, ``t``, ``dt [N]`` -> velocity ``[N, P, D]``."""
        h = self.in_proj(x)
        c = self.cond_proj(cond)
        dim = h.shape[-1]
        te = self.time_mlp(timestep_embedding(t, dim)) + self.delta_time_mlp(timestep_embedding(dt, dim))
        mu = mu.reshape(x.shape[0], -1, dim)
        seq = mx.concatenate([mu, te[:, None], c, h], axis=1)
        out = self.decoder(input_embeddings=seq, causal=False)
        return self.out_proj(out[:, mu.shape[1] + 1 + c.shape[1]:])


class UnifiedCFM(nn.Module):
    """Holds the estimator under the checkpoint's ``feat_decoder.estimator`` path and solves
    the flow with Euler steps, classifier-free guidance and CFG-Zero* (upstream's sampler)."""

    def __init__(self, a: LMArgs, feat_dim: int):
        super().__init__()
        self.estimator = LocDiT(a, feat_dim)
        # the same network on another runtime (onnx_local.OnnxLocDiT), called in its place
        self.external_estimator = None

    def __call__(self, mu: mx.array, cond: mx.array, noise: mx.array, steps: int,
                 cfg_value: float | mx.array) -> mx.array:
        """``noise [N, P, D]`` (the start), ``mu [N, 2H]``, ``cond [N, P, D]`` -> the patches
        ``[N, P, D]``: N rows (the patch of one request, or one each of several requests that
        take the same number of steps), ``cfg_value`` one for all or ``[N]``, one per row.

        Times run 1 -> 0 on a swayed grid t + (cos(pi t / 2) - 1 + t); the first 4% of steps
        (at least one) leave x unchanged (CFG-Zero*'s zero init); the others run the estimator
        on [conditioned, unconditioned] rows and mix them with each row's optimised scale s* of
        its unconditioned velocity: v = s* v_u + cfg (v_c - s* v_u)."""
        n = noise.shape[0]
        if isinstance(cfg_value, mx.array):
            cfg_value = cfg_value.reshape(n, 1, 1)
        grid = [1.0 - i / steps for i in range(steps + 1)]
        grid = mx.array(grid, mx.float32)
        grid = grid + (mx.cos(math.pi / 2 * grid) - 1 + grid)
        estimator = self.external_estimator or self.estimator
        x = noise
        t, dt = grid[0], grid[0] - grid[1]
        zero_steps = max(1, int((steps + 1) * 0.04))
        for step in range(1, steps + 1):
            if step > zero_steps:
                xs = mx.concatenate([x, x], axis=0)
                mus = mx.concatenate([mu, mx.zeros_like(mu)], axis=0)
                ts = mx.broadcast_to(t, (2 * n,))
                v = estimator(xs, mus, ts, mx.concatenate([cond, cond], axis=0), mx.zeros((2 * n,)))
                pos, neg = v[:n], v[n:]
                s = (pos * neg).sum((1, 2), keepdims=True) / ((neg * neg).sum((1, 2), keepdims=True) + 1e-8)
                x = x - dt * (neg * s + cfg_value * (pos - neg * s))
            t = t - dt
            if step < steps:
                dt = t - grid[step + 1]
        return x
