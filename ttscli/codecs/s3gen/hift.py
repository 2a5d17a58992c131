"""HiFT (``mel2wav``): S3Gen's vocoder, 80-mel at 50 Hz -> 24 kHz.

Neural source filter + iSTFTNet (CosyVoice2's ``HiFTGenerator``): a conv F0 predictor, a
harmonic source (F0 and 8 overtones, voiced where F0 > 10 Hz) whose STFT is injected at every
upsampling stage, HiFi-GAN residual blocks with Snake, and an iSTFT (n_fft 16, hop 4) of the
predicted log-magnitude and phase. Channels-last ``[T, C]``, batch 1; PyTorch semantics.

The source draws random numbers inside upstream's call (initial phases of the overtones and
Gaussian noise); :class:`SourceDraws` carries them so a caller can replay a recorded set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.checkpoint import fold_weight_norm  # noqa: F401  (re-exported)
from ttscli.nn.spectral import istft, snake, stft_basis
from ttscli.nn.conv import Conv1d, ConvTranspose1d, pad_time


@dataclass
class HiFTArgs:
    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10.0
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    n_fft: int = 16
    hop_len: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    f0_channels: int = 512
    conv_pre_look_right: int = 4     # the causal HiFT's conv_pre lookahead (frames)

    @property
    def upsample_scale(self) -> int:
        return int(np.prod(self.upsample_rates)) * self.hop_len


@dataclass
class SourceDraws:
    """The source's random numbers: ``phase [H]`` initial phase per harmonic (upstream draws
    U(-pi, pi) and zeroes the fundamental's) and ``noise [L, H]`` standard normals."""
    phase: mx.array
    noise: mx.array = field(repr=False)

    @classmethod
    def draw(cls, n_samples: int, harmonics: int, key: mx.array | None = None) -> SourceDraws:
        k1, k2 = mx.random.split(key) if key is not None else (None, None)
        phase = mx.random.uniform(-math.pi, math.pi, (harmonics,), key=k1)
        phase = phase * (mx.arange(harmonics) > 0)
        return cls(phase, mx.random.normal((n_samples, harmonics), key=k2))


class Snake(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.alpha = mx.ones((channels,))

    def __call__(self, x: mx.array) -> mx.array:
        return snake(x, self.alpha)


def _same_or_causal(kernel_size: int, dilation: int, causal: bool) -> tuple[int, int]:
    span = dilation * (kernel_size - 1)
    return (span, 0) if causal else (span // 2, span // 2)


class ResBlock(nn.Module):
    """Three (Snake, dilated conv, Snake, conv) residual units; ``causal``: every conv padded on
    the left only (CosyVoice3's causal HiFT)."""

    def __init__(self, channels: int, kernel_size: int, dilations, causal: bool = False):
        super().__init__()
        self.convs1 = [Conv1d(channels, channels, kernel_size, dilation=d,
                              padding=_same_or_causal(kernel_size, d, causal)) for d in dilations]
        self.convs2 = [Conv1d(channels, channels, kernel_size, padding=_same_or_causal(kernel_size, 1, causal))
                       for _ in dilations]
        self.activations1 = [Snake(channels) for _ in dilations]
        self.activations2 = [Snake(channels) for _ in dilations]

    def __call__(self, x: mx.array) -> mx.array:
        for c1, c2, a1, a2 in zip(self.convs1, self.convs2, self.activations1, self.activations2):
            x = c2(a2(c1(a1(x))), residual=x)
        return x


class ConvRNNF0Predictor(nn.Module):
    """Five (conv k3, ELU) layers and a linear head; |output| is F0 in Hz per mel frame."""

    def __init__(self, in_channels: int = 80, channels: int = 512):
        super().__init__()
        layers = []
        for i in range(5):
            layers += [Conv1d(in_channels if i == 0 else channels, channels, 3, padding=1), nn.ELU()]
        self.condnet = layers
        self.classifier = nn.Linear(channels, 1)

    def __call__(self, mel: mx.array) -> mx.array:
        """``mel [T, 80]`` -> ``f0 [T]``."""
        x = mel
        for layer in self.condnet:
            x = layer(x)
        return mx.abs(self.classifier(x)[:, 0])


class CausalConvRNNF0Predictor(ConvRNNF0Predictor):
    """The F0 predictor with causal convs: the first sees 3 frames ahead (right padding), the
    other four 2 frames back, so F0 of a frame is final once 3 more frames exist."""

    def __init__(self, in_channels: int = 80, channels: int = 512):
        super().__init__(in_channels, channels)
        self.condnet[0] = Conv1d(in_channels, channels, 4, padding=(0, 3))
        for i in range(2, len(self.condnet), 2):
            self.condnet[i] = Conv1d(channels, channels, 3, padding=(2, 0))


class SourceModuleHnNSF(nn.Module):
    """Harmonic source: sines at F0 x (1..H) with the draws' phases, noise, merged by a linear+tanh."""

    def __init__(self, a: HiFTArgs):
        super().__init__()
        self.a = a
        self.l_linear = nn.Linear(a.nb_harmonics + 1, 1)

    def __call__(self, f0: mx.array, draws: SourceDraws) -> mx.array:
        """``f0 [T]`` per mel frame -> source ``[T * upsample_scale]``."""
        a = self.a
        h = mx.arange(1, a.nb_harmonics + 2, dtype=mx.float32)
        f = mx.repeat(f0, a.upsample_scale)[:, None]              # nearest upsampling, as upstream
        # torch sums float32 in double on the CPU: a float32 running sum over 10^5 samples
        # drifts by ~1e-3 cycles, audible as phase error in the overtones
        # (the GPU has no float64: this sum runs on the CPU stream wherever the rest runs)
        step = (f * h / a.sampling_rate).astype(mx.float64, stream=mx.cpu)
        cycles = mx.cumsum(step, axis=0, stream=mx.cpu).astype(mx.float32, stream=mx.cpu)
        theta = 2 * math.pi * (cycles - mx.floor(cycles))          # torch's % 1 on positives
        uv = (f > a.nsf_voiced_threshold).astype(mx.float32)
        amp = uv * a.nsf_sigma + (1 - uv) * (a.nsf_alpha / 3)
        sines = a.nsf_alpha * mx.sin(theta + draws.phase) * uv + amp * draws.noise
        return mx.tanh(self.l_linear(sines))[:, 0]


class CausalSourceModuleHnNSF(nn.Module):
    """CosyVoice3's causal harmonic source (upstream ``SineGen2(causal=True)``).

    Per mel frame, the cycles advanced by each harmonic (``f0 h / sr`` mod 1) are accumulated
    frame by frame and held for the frame's 480 samples (nearest upsampling of the phase, so
    the sines step once per frame, exactly as upstream's causal path does); noise comes from
    a fixed uniform draw read by absolute sample (``noise [L, H]``), so a sample's source never
    changes when more frames arrive. The initial-phase draw upstream adds to sample 0 falls
    outside its per-frame interpolation and has no effect, so it is not an input.
    """

    def __init__(self, a: HiFTArgs):
        super().__init__()
        self.a = a
        self.l_linear = nn.Linear(a.nb_harmonics + 1, 1)

    def __call__(self, f0: mx.array, noise: mx.array) -> mx.array:
        """``f0 [T]`` per mel frame, ``noise [>= T * 480, H]`` -> source ``[T * 480]``."""
        a = self.a
        n = a.upsample_scale
        h = mx.arange(1, a.nb_harmonics + 2, dtype=mx.float32)
        rad = f0[:, None] * h / a.sampling_rate
        rad = rad - mx.floor(rad)
        # float64 running sum on the CPU stream, as torch sums float32 on the CPU; then the
        # float32 products in upstream's order (the phase reaches 1e5 rad, where one float32
        # rounding moves a sine visibly)
        cycles = mx.cumsum(rad.astype(mx.float64, stream=mx.cpu), axis=0, stream=mx.cpu)
        phase = cycles.astype(mx.float32, stream=mx.cpu) * 2.0 * math.pi * float(n)
        sines = a.nsf_alpha * mx.sin(mx.repeat(phase, n, axis=0))
        uv = mx.repeat((f0 > a.nsf_voiced_threshold).astype(mx.float32), n)[:, None]
        amp = uv * a.nsf_sigma + (1 - uv) * (a.nsf_alpha / 3)
        waves = sines * uv + amp * noise[: sines.shape[0]]
        return mx.tanh(self.l_linear(waves))[:, 0]


class NearestUpsampleConv1d(Conv1d):
    """Nearest upsampling by ``stride`` then a left-padded conv (upstream ``CausalConv1dUpsample``):
    the causal HiFT's replacement for a transposed conv."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__(in_channels, out_channels, kernel_size, padding=(kernel_size - 1, 0))
        self.up = stride

    def __call__(self, x: mx.array, residual: mx.array | None = None) -> mx.array:
        return super().__call__(mx.repeat(x, self.up, axis=-2), residual)


def _stft_re_im(x: mx.array, n_fft: int, hop: int) -> mx.array:
    """``x [L]`` -> ``[L/hop + 1, 2 * bins]`` (real ‖ imag) of torch.stft (center, reflect, periodic Hann)."""
    pad = n_fft // 2
    xp = pad_time(x[:, None], pad, pad, "reflect")[:, 0]
    blocks = xp.reshape(-1, hop)
    per = n_fft // hop
    nfr = blocks.shape[0] - per + 1
    frames = mx.concatenate([blocks[j: j + nfr] for j in range(per)], axis=-1)
    return frames @ stft_basis(n_fft)


def decode_spectrum(g, mel: mx.array, source: mx.array) -> mx.array:
    """HiFT's decoder, shared by the plain and the causal generator (their layers differ in
    padding, not in how they are wired): the mel upsampled with the source's STFT fused in at
    each stage, then magnitude and phase to a waveform by the inverse STFT."""
    a = g.a
    s = _stft_re_im(source, a.n_fft, a.hop_len)
    x = g.conv_pre(mel)
    nk = len(a.resblock_kernel_sizes)
    for i, up in enumerate(g.ups):
        x = up(nn.leaky_relu(x, a.lrelu_slope))
        if i == len(g.ups) - 1:
            x = pad_time(x, 1, 0, "reflect")
        x = x + g.source_resblocks[i](g.source_downs[i](s))
        xs = g.resblocks[i * nk](x)
        for j in range(1, nk):
            xs = xs + g.resblocks[i * nk + j](x)
        x = xs / nk
    x = g.conv_post(nn.leaky_relu(x, 0.01))
    bins = a.n_fft // 2 + 1
    mag = mx.minimum(mx.exp(x[:, :bins]), 1e2)
    return mx.clip(istft(mag, mx.sin(x[:, bins:]), a.n_fft, a.hop_len), -a.audio_limit, a.audio_limit)


class HiFTGenerator(nn.Module):
    def __init__(self, a: HiFTArgs):
        super().__init__()
        self.a = a
        ch = a.base_channels
        self.m_source = SourceModuleHnNSF(a)
        self.f0_predictor = ConvRNNF0Predictor(a.in_channels, a.f0_channels)
        self.conv_pre = Conv1d(a.in_channels, ch, 7, padding=3)
        self.ups = [ConvTranspose1d(ch // 2 ** i, ch // 2 ** (i + 1), k, u, padding=(k - u) // 2)
                    for i, (u, k) in enumerate(zip(a.upsample_rates, a.upsample_kernel_sizes))]
        down_rates = [1, *a.upsample_rates[::-1][:-1]]
        cum = np.cumprod(down_rates)[::-1]
        spec_ch = a.n_fft + 2
        self.source_downs, self.source_resblocks = [], []
        for i, (u, k, d) in enumerate(zip(cum, a.source_resblock_kernel_sizes, a.source_resblock_dilation_sizes)):
            c = ch // 2 ** (i + 1)
            u = int(u)
            self.source_downs.append(Conv1d(spec_ch, c, 1) if u == 1 else Conv1d(spec_ch, c, 2 * u, u, padding=u // 2))
            self.source_resblocks.append(ResBlock(c, k, d))
        self.resblocks = [ResBlock(ch // 2 ** (i + 1), k, d) for i in range(len(self.ups))
                          for k, d in zip(a.resblock_kernel_sizes, a.resblock_dilation_sizes)]
        self.conv_post = Conv1d(ch // 2 ** len(self.ups), spec_ch, 7, padding=3)
        # the same decode on another runtime (onnx_hift.OnnxDecode), called in its place
        self.external_decode = None

    def source(self, mel: mx.array, draws: SourceDraws | None = None, key: mx.array | None = None):
        """(f0 ``[T]``, source ``[T * 480]``) of ``mel [T, 80]``."""
        f0 = self.f0_predictor(mel)
        if draws is None:
            draws = SourceDraws.draw(f0.shape[0] * self.a.upsample_scale, self.a.nb_harmonics + 1, key)
        return f0, self.m_source(f0, draws)

    def decode(self, mel: mx.array, source: mx.array) -> mx.array:
        """``mel [T, 80]``, ``source [T * 480]`` -> waveform ``[T * 480]``."""
        if self.external_decode is not None:
            return self.external_decode(mel, source)
        return decode_spectrum(self, mel, source)

    def __call__(self, mel: mx.array, draws: SourceDraws | None = None,
                 key: mx.array | None = None) -> tuple[mx.array, mx.array]:
        """(waveform, source), both ``[T * 480]``, as upstream ``inference``."""
        _, s = self.source(mel, draws, key)
        return self.decode(mel, s), s


class CausalHiFTGenerator(nn.Module):
    """CosyVoice3's vocoder (upstream ``CausalHiFTGenerator``): :class:`HiFTGenerator`'s network
    with every conv causal. ``conv_pre`` sees ``conv_pre_look_right`` mel frames ahead and the
    F0 predictor 3, the rest only the past; transposed convs become nearest upsampling + conv;
    the harmonic source reads fixed draws by sample. So audio up to a point is final once the
    mel a few frames past it exists, which is what upstream's streaming relies on.
    """

    def __init__(self, a: HiFTArgs):
        super().__init__()
        self.a = a
        ch = a.base_channels
        self.m_source = CausalSourceModuleHnNSF(a)
        self.f0_predictor = CausalConvRNNF0Predictor(a.in_channels, a.f0_channels)
        self.conv_pre = Conv1d(a.in_channels, ch, a.conv_pre_look_right + 1, padding=(0, a.conv_pre_look_right))
        self.ups = [NearestUpsampleConv1d(ch // 2 ** i, ch // 2 ** (i + 1), k, u)
                    for i, (u, k) in enumerate(zip(a.upsample_rates, a.upsample_kernel_sizes))]
        cum = np.cumprod([1, *a.upsample_rates[::-1][:-1]])[::-1]
        spec_ch = a.n_fft + 2
        self.source_downs, self.source_resblocks = [], []
        for i, (u, k, d) in enumerate(zip(cum, a.source_resblock_kernel_sizes, a.source_resblock_dilation_sizes)):
            c, u = ch // 2 ** (i + 1), int(u)
            down = Conv1d(spec_ch, c, 1) if u == 1 else Conv1d(spec_ch, c, 2 * u, u, padding=(u - 1, 0))
            self.source_downs.append(down)
            self.source_resblocks.append(ResBlock(c, k, d, causal=True))
        self.resblocks = [ResBlock(ch // 2 ** (i + 1), k, d, causal=True) for i in range(len(self.ups))
                          for k, d in zip(a.resblock_kernel_sizes, a.resblock_dilation_sizes)]
        self.conv_post = Conv1d(ch // 2 ** len(self.ups), spec_ch, 7, padding=(6, 0))

    def decode(self, mel: mx.array, source: mx.array) -> mx.array:
        """``mel [T, 80]``, ``source [T * 480]`` -> waveform ``[T * 480]`` (upstream's finalize=True)."""
        return decode_spectrum(self, mel, source)

    def __call__(self, mel: mx.array, noise: mx.array) -> tuple[mx.array, mx.array]:
        """(waveform, source), both ``[T * 480]``; ``noise [>= T * 480, H]`` the source's fixed draw."""
        f0 = self.f0_predictor(mel)
        s = self.m_source(f0, noise)
        return self.decode(mel, s), s

    def final_samples(self, frames: int) -> int:
        """Of a mel ``frames`` long whose end is not the utterance's, the samples that no later
        frame can change (upstream's streaming keeps the same: the F0 lookahead, conv_pre's and
        one frame of iSTFT overlap held back)."""
        held = 3 + self.a.conv_pre_look_right + 1
        return max(frames - held, 0) * self.a.upsample_scale
