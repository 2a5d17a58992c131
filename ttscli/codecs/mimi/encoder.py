"""Qwen3-TTS-Tokenizer-12Hz encoder: 24 kHz waveform -> 16 codebook indices per 80 ms frame.

It is the transformers ``MimiModel`` encoder half: causal SEANet (ELU, strides 4·5·6·8 -> 25 Hz),
a causal transformer (LayerNorm, GELU MLP, LayerScale, RoPE), a stride-2 conv (12.5 Hz) and a split
RVQ (1 semantic + N-1 acoustic levels, each half projecting the same input). Only the first
``encoder_valid_num_quantizers`` levels are kept, as upstream does. Voice cloning uses it once per
reference clip.

Parameter names and shapes follow ``speech_tokenizer/model.safetensors`` after the ``encoder.``
prefix (convs in PyTorch layout, ttscli.nn.conv's modules). On the Linux CPU every conv runs as BLAS GEMMs
(ttscli.nn.conv: shifted per-tap products; strided kernels over blocks of ``stride`` frames), ELU/GELU run
in numpy (MLX's CPU exp/erf are scalar and slow), and the first SEANet stages run in short chunks
with carried causal context. The upstream sliding window (250) is not applied, as in upstream's
eager/SDPA attention.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from ttscli.checkpoint import load_strict, read_component
from ttscli.config import BaseArgs, read_json
from ttscli.errors import AudioInputError, CheckpointError
from ttscli.nn import Attention
from ttscli.nn.conv import Conv1d, conv1d_accumulate, conv1d_im2col, pad_time

PREFIX = "encoder."
IGNORED_PREFIXES = ("decoder.",)


@dataclass
class EncoderArgs(BaseArgs):
    """``encoder_config`` of speech_tokenizer/config.json (MimiConfig defaults) plus the top-level fields."""

    sampling_rate: int = 24000
    audio_channels: int = 1
    hidden_size: int = 512
    num_filters: int = 64
    num_residual_layers: int = 1
    upsampling_ratios: list[int] = field(default_factory=lambda: [8, 6, 5, 4])
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    use_causal_conv: bool = True
    pad_mode: str = "constant"
    compress: int = 2
    codebook_size: int = 2048
    codebook_dim: int = 256
    num_quantizers: int = 32
    num_semantic_quantizers: int = 1
    use_conv_shortcut: bool = False
    vector_quantization_hidden_dimension: int = 256
    num_hidden_layers: int = 8
    intermediate_size: int = 2048
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int | None = None
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    attention_bias: bool = False
    _frame_rate: float | None = None
    # top level of speech_tokenizer/config.json
    encoder_valid_num_quantizers: int = 16
    encode_downsample_rate: int = 1920

    def __post_init__(self):
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads

    @classmethod
    def from_config(cls, config: dict, source: str = "speech_tokenizer/config.json") -> "EncoderArgs":
        args = cls.from_section(config, "encoder_config", ("encoder_valid_num_quantizers", "encode_downsample_rate"),
                                source=source)
        if not args.use_causal_conv:
            raise CheckpointError("speech_tokenizer encoder_config.use_causal_conv=false is not supported")
        if args.audio_channels != 1:
            raise CheckpointError("speech_tokenizer encoder_config.audio_channels must be 1")
        if not args.num_semantic_quantizers < args.encoder_valid_num_quantizers <= args.num_quantizers:
            raise CheckpointError("speech_tokenizer config.json: encoder_valid_num_quantizers must be in "
                                  "(num_semantic_quantizers, num_quantizers]")
        return args

    @property
    def encodec_frame_rate(self) -> int:
        return math.ceil(self.sampling_rate / math.prod(self.upsampling_ratios))

    @property
    def downsample_kernel(self) -> int:
        frame_rate = self._frame_rate or self.sampling_rate / (math.prod(self.upsampling_ratios) * 2)
        return 2 * int(self.encodec_frame_rate / frame_rate)


# ----------------------------------------------------------------------------- SEANet

class CausalConv1d(nn.Module):
    """MimiConv1d, causal: left pad (k_eff - stride), right pad up to a whole number of strides."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, stride: int = 1, dilation: int = 1,
                 bias: bool = True, pad_mode: str = "constant"):
        super().__init__()
        self.conv = Conv1d(in_ch, out_ch, kernel_size, bias=bias)    # weights and taps; padding is ours
        self.kernel_size, self.stride, self.dilation = kernel_size, stride, dilation
        if pad_mode not in ("constant", "replicate"):
            raise CheckpointError(f"speech_tokenizer: unsupported pad_mode {pad_mode!r} (constant or replicate)")
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
            # measured 1.5-2.7x faster than im2col or mx.conv1d for the SEANet shapes
            return conv1d_accumulate(x, taps, bias, d, s, residual)
        return conv1d_im2col(x, taps, bias, d, s, residual)


class ELU(nn.Module):
    """ELU (alpha 1) evaluated by numpy: MLX's CPU exp is ~8x slower than numpy's vectorised expm1,
    and the SEANet applies ELU to ~70M activations per 10 s of audio. One host sync per call is
    fine here: the encoder runs once per reference clip."""

    def __call__(self, x: mx.array) -> mx.array:
        a = np.asarray(x)
        out = np.minimum(a, 0.0)  # one temporary: fresh 60 MB buffers page-fault slowly in this VM
        np.expm1(out, out=out)
        np.maximum(a, out, out=out)
        return mx.array(out)


class ResnetBlock(nn.Module):
    def __init__(self, args: EncoderArgs, dim: int, dilation: int):
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
    def __init__(self, args: EncoderArgs):
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


# ----------------------------------------------------------------------------- transformer

# Numerical Recipes erfcc coefficients: erfc(z) = t * exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0,
# fractional error < 1.2e-7 everywhere.
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
         -0.82215223, 0.17087277)


def gelu_erf(x: mx.array) -> mx.array:
    """Exact (erf) GELU, x/2 * erfc(-x/sqrt2), evaluated by numpy: MLX's CPU erf costs ~50 ns per
    element (2.5x slower than this for the 8 x [T, 2048] MLP activations), and is less accurate in the
    negative tail."""
    a = np.asarray(x)
    z = np.abs(a) * np.float32(1.0 / math.sqrt(2.0))
    t = 0.5 * z
    t += 1.0
    np.reciprocal(t, out=t)
    p = np.full_like(t, _ERFC[-1])
    for c in _ERFC[-2::-1]:
        p *= t
        p += c
    z *= z
    np.subtract(p, z, out=p)
    np.exp(p, out=p)
    p *= t  # erfc(|x|/sqrt2)
    np.subtract(2.0, p, out=p, where=a > 0)  # erfc(-x/sqrt2) for x > 0
    p *= a
    p *= 0.5
    return mx.array(p)


_ACTS = {"gelu": gelu_erf, "gelu_new": nn.gelu_approx, "gelu_pytorch_tanh": nn.gelu_approx, "relu": nn.relu,
         "silu": nn.silu}


class LayerScale(nn.Module):
    def __init__(self, dims: int, init: float = 0.01):
        super().__init__()
        self.scale = mx.full((dims,), init)

    def __call__(self, x: mx.array) -> mx.array:
        return x * self.scale


class MLP(nn.Module):
    def __init__(self, args: EncoderArgs):
        super().__init__()
        self.fc1 = nn.Linear(args.hidden_size, args.intermediate_size, bias=False)
        self.fc2 = nn.Linear(args.intermediate_size, args.hidden_size, bias=False)
        if args.hidden_act not in _ACTS:
            raise CheckpointError(f"speech_tokenizer encoder: unsupported hidden_act {args.hidden_act!r}")
        self.act = _ACTS[args.hidden_act]

    def __call__(self, x: mx.array) -> mx.array:
        return self.fc2(self.act(self.fc1(x)))


class TransformerLayer(nn.Module):
    def __init__(self, args: EncoderArgs):
        super().__init__()
        self.self_attn = Attention(args.hidden_size, args.num_attention_heads, args.num_key_value_heads,
                                   args.head_dim, rope_theta=args.rope_theta, bias=args.attention_bias,
                                   qk_norm=False)
        self.mlp = MLP(args)
        self.input_layernorm = nn.LayerNorm(args.hidden_size, eps=args.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(args.hidden_size, eps=args.norm_eps)
        self.self_attn_layer_scale = LayerScale(args.hidden_size)
        self.mlp_layer_scale = LayerScale(args.hidden_size)

    def __call__(self, x: mx.array, mask) -> mx.array:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), mask=mask))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class Transformer(nn.Module):
    def __init__(self, args: EncoderArgs):
        super().__init__()
        self.layers = [TransformerLayer(args) for _ in range(args.num_hidden_layers)]

    def __call__(self, x: mx.array) -> mx.array:
        # Upstream builds a plain causal mask here: MimiConfig.sliding_window is not applied by
        # transformers' create_causal_mask (checked against goldens with a window shorter than the clip).
        mask = "causal" if x.shape[1] > 1 else None
        for layer in self.layers:
            x = layer(x, mask)
        return x


# ----------------------------------------------------------------------------- split RVQ

class EuclideanCodebook(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.initialized = mx.ones((1,))
        self.cluster_usage = mx.ones((size,))
        self.embed_sum = mx.zeros((size, dim))

    def embed(self) -> mx.array:
        return self.embed_sum / mx.maximum(self.cluster_usage, 1e-5)[:, None]


class VectorQuantization(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.codebook = EuclideanCodebook(size, dim)


class ResidualVectorQuantizer(nn.Module):
    def __init__(self, args: EncoderArgs, num_quantizers: int):
        super().__init__()
        vq_dim = args.vector_quantization_hidden_dimension
        self.layers = [VectorQuantization(args.codebook_size, args.codebook_dim) for _ in range(num_quantizers)]
        if vq_dim != args.hidden_size:
            self.input_proj = Conv1d(args.hidden_size, vq_dim, 1, bias=False)
            self.output_proj = Conv1d(vq_dim, args.hidden_size, 1, bias=False)

    def encode(self, x: mx.array, n: int) -> mx.array:
        """``x [T, hidden]`` -> codes ``[T, n]``: greedy nearest codeword on the running residual."""
        if "input_proj" in self:
            x = x @ self.input_proj.weight[:, :, 0].T
        codes = []
        for layer in self.layers[:n]:
            embed = layer.codebook.embed()
            # argmin |x - e|^2 == argmin (|e|^2 - 2 x.e): the |x|^2 term is the same for every codeword.
            score = mx.sum(embed * embed, axis=-1) - 2.0 * (x @ embed.T)
            idx = mx.argmin(score, axis=-1)
            codes.append(idx)
            x = x - embed[idx]
        return mx.stack(codes, axis=-1)


class SplitResidualVectorQuantizer(nn.Module):
    def __init__(self, args: EncoderArgs):
        super().__init__()
        self.num_semantic = args.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = ResidualVectorQuantizer(args, args.num_semantic_quantizers)
        self.acoustic_residual_vector_quantizer = ResidualVectorQuantizer(
            args, args.num_quantizers - args.num_semantic_quantizers)

    def encode(self, x: mx.array, n: int) -> mx.array:
        sem = self.semantic_residual_vector_quantizer.encode(x, self.num_semantic)
        ac = self.acoustic_residual_vector_quantizer.encode(x, n - self.num_semantic)
        return mx.concatenate([sem, ac], axis=-1)


# ----------------------------------------------------------------------------- model

class SpeechEncoder(nn.Module):
    def __init__(self, args: EncoderArgs):
        super().__init__()
        self.args = args
        self.encoder = SEANetEncoder(args)
        self.encoder_transformer = Transformer(args)
        self.downsample = CausalConv1d(args.hidden_size, args.hidden_size, args.downsample_kernel, stride=2,
                                       bias=False, pad_mode="replicate")
        self.quantizer = SplitResidualVectorQuantizer(args)

    def hidden(self, wav: mx.array, chunk_hops: int | None = 16) -> mx.array:
        """``wav [B, N]`` -> latent frames ``[B, T, hidden]`` (12.5 Hz), the quantizer input.

        ``chunk_hops``: SEANet chunk length in 25 Hz frames (None: whole clip at once; same result)."""
        hop = math.prod(self.args.upsampling_ratios)
        x = self.encoder(wav[..., None], chunk=None if chunk_hops is None else chunk_hops * hop)
        x = self.encoder_transformer(x)
        return self.downsample(x)

    def encode(self, wav_24k) -> np.ndarray:
        """Codes ``[ceil(N / 1920), encoder_valid_num_quantizers]`` int32 of one mono 24 kHz waveform."""
        wav = np.asarray(wav_24k, dtype=np.float32) if not isinstance(wav_24k, mx.array) else wav_24k
        if wav.ndim != 1 or wav.shape[0] == 0:
            raise AudioInputError("reference audio must be a non-empty mono waveform")
        n = wav.shape[0]
        h = self.hidden(mx.array(wav).astype(mx.float32)[None])[0]
        codes = self.quantizer.encode(h, self.args.encoder_valid_num_quantizers)
        frames = -(-n // self.args.encode_downsample_rate)
        return np.array(codes[:frames].astype(mx.int32))


def load_speech_encoder(path: Path, dtype: str = "float32") -> SpeechEncoder:
    """Encoder half of ``speech_tokenizer/`` (config.json + model.safetensors): strict on ``encoder.*``."""
    path = Path(path)
    model = SpeechEncoder(EncoderArgs.from_config(read_json(path / "config.json"), source=str(path / "config.json")))
    weights, source = read_component(path, PREFIX, others=IGNORED_PREFIXES)
    return load_strict(model, weights, dtype=dtype, source=source, where=PREFIX, hint="re-download the checkpoint")


def build_random_speech_encoder(seed: int = 0, args: EncoderArgs | None = None) -> SpeechEncoder:
    """Encoder at the published dimensions (or ``args``) with deterministic random weights, for bench."""
    args = args or EncoderArgs()
    mx.random.seed(seed)
    model = SpeechEncoder(args)

    def uniform(shape, std):  # uniform draws are ~3x cheaper than normals on the CPU; same variance
        return mx.random.uniform(-std * math.sqrt(3.0), std * math.sqrt(3.0), shape)

    params = []
    for key, value in tree_flatten(model.parameters()):
        if key.endswith(("cluster_usage", "initialized")) or "layernorm.weight" in key:
            params.append((key, mx.ones(value.shape)))
        elif key.endswith("layer_scale.scale"):
            params.append((key, mx.full(value.shape, 0.1)))
        elif key.endswith("embed_sum"):
            params.append((key, uniform(value.shape, 1.0)))
        elif value.ndim >= 2:
            params.append((key, uniform(value.shape, math.sqrt(1.0 / math.prod(value.shape[1:])))))
        else:
            params.append((key, uniform(value.shape, 0.02)))
    return load_strict(model, dict(params), source="random weights")
