"""Qwen3-TTS-Tokenizer-12Hz decoder in MLX: codes ``[T, 16]`` -> 24 kHz waveform ``[T*1920]``.

split-RVQ dequantisation -> causal conv -> sliding-window transformer -> 2x (transposed conv +
ConvNeXt) -> causal conv -> 4 x (SnakeBeta, transposed conv, 3 dilated residual units) ->
SnakeBeta -> causal conv -> clamp(-1, 1). Every stage is causal, so a stream decoded chunk by
chunk with the caches from :meth:`SpeechDecoder.make_cache` equals a one-shot decode.

Parameter names are the checkpoint's after the ``decoder.`` prefix, except ``_codebook`` ->
``codebook`` (MLX treats ``_`` attributes as private). Conv weights keep the checkpoint's
layout; :mod:`ttscli.nn.conv` derives the GEMM layouts it needs.
"""
from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from .config import DecoderArgs
from .conv import CausalConv1d, CausalConvTranspose1d, CausalDepthwiseConv1d, SnakeBeta
from .transformer import DecoderTransformer, TransformerCache


class Codebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.cluster_usage = mx.ones((size,))
        self.embedding_sum = mx.zeros((size, dim))

    def embedding(self) -> mx.array:
        return self.embedding_sum / mx.maximum(self.cluster_usage, 1e-5)[:, None]


class VQLayer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.codebook = Codebook(size, dim)


class VQ(nn.Module):
    def __init__(self, levels: int, size: int, dim: int):
        super().__init__()
        self.layers = [VQLayer(size, dim) for _ in range(levels)]


class Projection(nn.Module):
    """A bias-free kernel-1 Conv1d; ``weight`` stays in the checkpoint layout ``[out, in, 1]``."""

    def __init__(self, out_dim: int, in_dim: int):
        super().__init__()
        self.weight = mx.zeros((out_dim, in_dim, 1))


class RVQ(nn.Module):
    def __init__(self, levels: int, size: int, dim: int, io_dim: int):
        super().__init__()
        self.input_proj = Projection(dim, io_dim)      # encode side only; loaded, unused here
        self.output_proj = Projection(io_dim, dim)
        self.vq = VQ(levels, size, dim)

    def tables(self) -> list[mx.array]:
        """Each level's codebook already pushed through output_proj: ``[size, io_dim]``."""
        proj = self.output_proj.weight[:, :, 0].astype(mx.float32)
        return [layer.codebook.embedding().astype(mx.float32) @ proj.T for layer in self.vq.layers]


class SplitRVQ(nn.Module):
    """Semantic level 0 and acoustic levels 1.. each have their own output projection; summed.

    The projection is linear, so each code's row is projected once at load time and a frame is
    the sum of 16 table rows (the reference sums within each half, then projects).
    """

    def __init__(self, args: DecoderArgs):
        super().__init__()
        dim = args.codebook_dim // 2
        self.size = args.codebook_size
        self.rvq_first = RVQ(1, args.codebook_size, dim, args.codebook_dim)
        self.rvq_rest = RVQ(args.num_quantizers - 1, args.codebook_size, dim, args.codebook_dim)
        self._table = None

    def prepare(self, dtype) -> None:
        self._table = mx.concatenate(self.rvq_first.tables() + self.rvq_rest.tables(), axis=0).astype(dtype)

    def __call__(self, codes: mx.array) -> mx.array:
        """codes ``[T, Q]`` int -> ``[T, codebook_dim]``."""
        offsets = mx.arange(codes.shape[1]) * self.size
        return self._table[codes + offsets].sum(axis=1)


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalDepthwiseConv1d(dim, 7)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = mx.zeros((dim,))

    def make_cache(self):
        return self.dwconv.make_cache()

    def __call__(self, x: mx.array, cache=None) -> mx.array:
        h = self.norm(self.dwconv(x, cache))
        h = self.pwconv2(nn.gelu(self.pwconv1(h)))
        return x + self.gamma * h


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, 1)

    def make_cache(self):
        return self.conv1.make_cache()

    def __call__(self, x: mx.array, cache=None) -> mx.array:
        h = self.conv1(self.act1(x), cache)
        return x + self.conv2(self.act2(h))


class Sequential(nn.Module):
    """Checkpoint-indexed children (``block.0``, ``upsample.0.1`` ...), each with its own cache."""

    def __init__(self, *children):
        super().__init__()
        self.block = list(children)

    def make_cache(self) -> list:
        return [m.make_cache() for m in self.block]

    def __call__(self, x: mx.array, caches: list | None = None) -> mx.array:
        for i, m in enumerate(self.block):
            x = m(x, None if caches is None else caches[i])
        return x


def decoder_block(args: DecoderArgs, i: int) -> Sequential:
    cin, cout = args.decoder_dim // 2 ** i, args.decoder_dim // 2 ** (i + 1)
    r = args.upsample_rates[i]
    return Sequential(SnakeBeta(cin), CausalConvTranspose1d(cin, cout, 2 * r, r),
                      *(ResidualUnit(cout, d) for d in (1, 3, 9)))


class DecoderCache:
    """Everything one stream carries between chunks: conv tails and transformer keys/values."""

    def __init__(self, model: "SpeechDecoder", capacity: int | None = None, reprime_frames: int | None = None):
        self.pre_conv = model.pre_conv.make_cache()
        self.transformer: TransformerCache = model.pre_transformer.make_cache(capacity, reprime_frames)
        self.upsample = [[m.make_cache() for m in stage] for stage in model.upsample]
        self.decoder = [m.make_cache() for m in model.decoder]
        self.frames = 0

    @property
    def reprimes(self) -> int:
        return self.transformer.reprimes


def _conv_caches(cache: DecoderCache):
    stack = [cache.pre_conv, cache.upsample, cache.decoder]
    while stack:
        c = stack.pop()
        if isinstance(c, list):
            stack.extend(c)
        elif c is not None:
            yield c


class SpeechDecoder(nn.Module):
    def __init__(self, args: DecoderArgs):
        super().__init__()
        self.args = args
        self.quantizer = SplitRVQ(args)
        self.pre_conv = CausalConv1d(args.codebook_dim, args.latent_dim, 3)
        self.pre_transformer = DecoderTransformer(args)
        self.upsample = [[CausalConvTranspose1d(args.latent_dim, args.latent_dim, f, f), ConvNeXtBlock(args.latent_dim)]
                         for f in args.upsampling_ratios]
        n = len(args.upsample_rates)
        out_dim = args.decoder_dim // 2 ** n
        self.decoder = [CausalConv1d(args.latent_dim, args.decoder_dim, 7),
                        *(decoder_block(args, i) for i in range(n)),
                        SnakeBeta(out_dim), CausalConv1d(out_dim, 1, 7)]

    @property
    def samples_per_frame(self) -> int:
        return self.args.samples_per_frame

    @property
    def sample_rate(self) -> int:
        return self.args.sample_rate

    @property
    def dtype(self):
        return self.pre_conv.conv.weight.dtype

    def prepare(self) -> "SpeechDecoder":
        """Derive load-time tables (projected codebooks, snake exponentials); call after loading."""
        self.quantizer.prepare(self.dtype)
        for _, m in self.named_modules():
            if isinstance(m, SnakeBeta):
                m.prepare()
        return self

    @property
    def conv_history_frames(self) -> int:
        """Frames of transformer output that the conv stack after it reaches back (FIR, so finite)."""
        per_step = self.samples_per_frame         # output samples per input step, stage by stage
        back = 0
        for stage in self.upsample:
            per_step //= stage[0].stride
            back += (stage[1].dwconv.kernel_size - 1) * per_step
        back += (self.decoder[0].kernel_size - 1) * per_step
        for m in self.decoder:
            if isinstance(m, Sequential):
                t = m.block[1]
                back += (t.blocks - 1) * per_step
                per_step //= t.stride
                back += sum((u.conv1.kernel_size - 1) * u.conv1.dilation for u in m.block[2:]) * per_step
        back += (self.decoder[-1].kernel_size - 1) * per_step
        return -(-back // self.samples_per_frame)

    def prime(self, codes: mx.array, cache: DecoderCache) -> None:
        """Advance ``cache`` over ``codes`` as left context without producing their audio.

        The transformer sees every context frame; the conv stack after it only the last
        ``conv_history_frames + 1`` (its receptive field), from a fresh state: the same caches
        a full decode would leave, for a fraction of the cost (e.g. voice-clone reference codes).
        """
        n = codes.shape[0]
        keep = min(n, self.conv_history_frames + 1)
        x = self.pre_conv(self.quantizer(codes), cache.pre_conv)
        x = self.pre_transformer(x[None], cache.transformer)[0][n - keep:]
        fresh = self.make_cache()
        cache.upsample, cache.decoder = fresh.upsample, fresh.decoder
        for s, stage in enumerate(self.upsample):
            for j, m in enumerate(stage):
                x = m(x, cache.upsample[s][j])
        for j, m in enumerate(self.decoder[:-1]):
            x = m(x, cache.decoder[j])
        x = self.decoder[-1](x, cache.decoder[-1])
        mx.eval(x, [c.tail for c in _conv_caches(cache)],
                cache.transformer.state())
        cache.frames += n

    def make_cache(self, capacity: int | None = None, reprime_frames: int | None = None) -> DecoderCache:
        """A fresh stream. ``capacity`` switches the transformer to a fixed-slot cache with re-prime."""
        return DecoderCache(self, capacity, reprime_frames)

    def __call__(self, codes: mx.array, cache: DecoderCache | None = None) -> mx.array:
        """codes ``[n, Q]`` int (>= 0) -> waveform ``[n * samples_per_frame]`` continuing ``cache``."""
        c = cache
        x = self.quantizer(codes)
        x = self.pre_conv(x, c and c.pre_conv)
        x = self.pre_transformer(x[None], c and c.transformer)[0]
        for s, stage in enumerate(self.upsample):
            for j, m in enumerate(stage):
                x = m(x, c and c.upsample[s][j])
        for j, m in enumerate(self.decoder):
            x = m(x, c and c.decoder[j])
        if c is not None:
            c.frames += codes.shape[0]
        return mx.clip(x[:, 0], -1.0, 1.0)

    def decode(self, codes, chunk_frames: int = 50) -> np.ndarray:
        """One clip: codes ``[T, Q]`` -> float32 ``[T * samples_per_frame]``.

        As upstream ``Qwen3TTSTokenizerV2Model.decode``: negative codes are clamped to 0 and the
        output is cut to (number of frames whose level-0 code is > -1) * samples_per_frame.
        Decoded in chunks through one cache, which equals a single pass (bounded memory).
        """
        codes = np.asarray(codes)
        self._check_codes(codes)
        valid = int((codes[:, 0] > -1).sum()) * self.samples_per_frame
        return self.decode_frames(np.maximum(codes, 0), chunk_frames)[:valid]

    def decode_frames(self, codes: np.ndarray, chunk_frames: int = 50,
                      cache: DecoderCache | None = None) -> np.ndarray:
        cache = cache or self.make_cache()
        out = []
        for start in range(0, codes.shape[0], chunk_frames):
            wav = self(mx.array(codes[start:start + chunk_frames].astype(np.int32)), cache)
            mx.eval(wav)
            out.append(np.array(wav.astype(mx.float32)))
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def chunked_decode(self, codes, chunk_size: int = 300, left_context: int = 25) -> np.ndarray:
        """Upstream's long-clip decode: independent windows of ``chunk_size`` frames, each with up to
        ``left_context`` frames re-decoded in front (positions restart) and their audio dropped.

        ``Qwen3TTSTokenizerV2Model.decode`` does this with 300 / 25; for clips up to 300 frames
        it is one pass. Provided for parity with upstream on longer clips; :meth:`decode` is the
        exact unchunked function.
        """
        codes = np.asarray(codes)
        self._check_codes(codes)
        valid = int((codes[:, 0] > -1).sum()) * self.samples_per_frame
        codes = np.maximum(codes, 0)
        out, start, T = [], 0, codes.shape[0]
        while start < T:
            end = min(start + chunk_size, T)
            ctx = min(left_context, start)
            wav = self.decode_frames(codes[start - ctx:end], chunk_frames=end - start + ctx)
            out.append(wav[ctx * self.samples_per_frame:])
            start = end
        return (np.concatenate(out) if out else np.zeros(0, np.float32))[:valid]

    def _check_codes(self, codes: np.ndarray) -> None:
        q = self.args.num_quantizers
        if codes.ndim != 2 or codes.shape[1] != q:
            raise ValueError(f"speech decoder expects codes [frames, {q}], got {list(codes.shape)}")
        if codes.size and codes.max() >= self.args.codebook_size:
            raise ValueError(f"code {int(codes.max())} out of range for codebook size {self.args.codebook_size}")
