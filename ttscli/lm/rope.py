"""RoPE variants: inverse frequencies (numpy, float64) and the MLX module that applies them.

``inv_freq`` and ``angles`` are numpy (this module imports MLX only in ``make_rope``) so the
Core ML export can tabulate the same angles the MLX stack uses.  The MLX side rotates with
``mx.fast.rope``; its ``freqs=`` argument takes *periods* (1 / inverse frequency), which is
easy to get backwards.

Multimodal sections (M-RoPE, Qwen2-VL / Qwen3-TTS): each rotary pair takes its angle from one
of three position rows (temporal, height, width), chosen by ``mrope_section``.  The
frequencies are the default ones and only the row differs, so when the three rows are equal,
as for text and for every Qwen3-TTS talker position, M-RoPE is exactly the plain 1-D RoPE: the
MLX stack, which takes one position per token, relies on that.
"""
from __future__ import annotations

import math

import numpy as np

from ttscli.lm.config import RopeArgs


def default_inv_freq(theta: float, head_dim: int) -> np.ndarray:
    """theta^(-2i/d) for the d/2 rotary pairs."""
    return 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)


def llama3_inv_freq(r: RopeArgs, head_dim: int) -> np.ndarray:
    """Llama 3.1 band scaling, by wavelength 2*pi/f against the original context length L.

    Short wavelengths (< L / high_freq_factor) keep their frequency, long ones (> L /
    low_freq_factor) are divided by ``factor``, and the band between moves linearly in
    s = L / wavelength from the divided to the original frequency.
    """
    f = default_inv_freq(r.theta, head_dim)
    ctx = r.original_max_position_embeddings
    wavelen = 2 * math.pi / f
    s = (ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor)
    mid = (1 - s) * f / r.factor + s * f
    out = np.where(wavelen > ctx / r.low_freq_factor, f / r.factor, mid)
    return np.where(wavelen < ctx / r.high_freq_factor, f, out)


def module_inv_freq(rope, head_dim: int) -> np.ndarray:
    """Inverse frequencies, float64, of a built RoPE module (``mlx.nn.RoPE`` or the custom-frequency
    rope of :func:`make_rope`, which holds the frequencies' reciprocals in ``_freqs``): what a
    kernel of ours rotating the same pairs needs."""
    if getattr(rope, "_freqs", None) is not None:
        return 1.0 / np.asarray(rope._freqs, np.float64)
    return default_inv_freq(rope.base, head_dim)


def longrope_inv_freq(r: RopeArgs, head_dim: int) -> np.ndarray:
    """LongRoPE: the default frequencies divided by the short factors, or by the long ones
    past the original context."""
    factors = np.asarray(r.long_factor if r.extended else r.short_factor, np.float64)
    if factors.shape != (head_dim // 2,):
        raise ValueError(f"longrope has {factors.size} factors for {head_dim // 2} rotary pairs")
    return default_inv_freq(r.theta, head_dim) / factors


def inv_freq(r: RopeArgs, head_dim: int) -> np.ndarray:
    """Inverse frequency of each rotary pair, float64 ``[head_dim // 2]``."""
    if r.type == "longrope":
        return longrope_inv_freq(r, head_dim)
    if r.type == "llama3":
        return llama3_inv_freq(r, head_dim)
    return default_inv_freq(r.theta, head_dim)


def mrope_rows(r: RopeArgs, head_dim: int) -> np.ndarray:
    """Which position row (0 temporal, 1 height, 2 width) each rotary pair reads.

    Contiguous: the pairs split in blocks of ``mrope_section``.  Interleaved: row k >= 1 takes
    pairs k, k+3, k+6, ... below 3 * section[k]; every other pair stays temporal.
    """
    half = head_dim // 2
    sec = r.mrope_section or (half,)
    if sum(sec) != half:
        raise ValueError(f"mrope_section {list(sec)} does not sum to head_dim / 2 = {half}")
    if not r.mrope_interleaved:
        return np.repeat(np.arange(len(sec)), sec)
    rows = np.zeros(half, dtype=np.int64)
    n = len(sec)
    for k in range(1, n):
        rows[k:n * sec[k]:n] = k
    return rows


def angles(r: RopeArgs, head_dim: int, positions) -> np.ndarray:
    """Rotation angle of each pair, float64 ``[..., L, head_dim // 2]``.

    ``positions``: ``[..., L]`` for 1-D RoPE, or ``[3, ..., L]`` (one row per axis) for M-RoPE;
    1-D positions under M-RoPE mean three equal rows.
    """
    pos = np.asarray(positions, dtype=np.float64)
    f = inv_freq(r, head_dim)
    if r.type != "mrope" or pos.ndim < 2 or pos.shape[0] != len(r.mrope_section):
        return pos[..., None] * f
    per_row = pos[..., None] * f                                # [3, ..., L, half]
    return np.stack([per_row[row, ..., j] for j, row in enumerate(mrope_rows(r, head_dim))], axis=-1)


def make_rope(r: RopeArgs, head_dim: int):
    """The MLX rotation (:class:`ttscli.nn.RoPE`) for 1-D positions; M-RoPE with equal rows is
    this too (see above).  LongRoPE's cos/sin scaling is not a rotation: the attention takes
    it in its scale (``RopeArgs.attention_factor``)."""
    from ttscli.nn.layers import NoRoPE, RoPE

    if r.type == "none":
        return NoRoPE()
    if r.type in ("llama3", "longrope"):
        return RoPE(head_dim, inv_freq=inv_freq(r, head_dim))
    # MLX's fused kernel derives the default frequencies from the base itself (float32, as
    # the reference does); keeping that path leaves today's Qwen3 numerics bit for bit.
    return RoPE(head_dim, base=r.theta)
