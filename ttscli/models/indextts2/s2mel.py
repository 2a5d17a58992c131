"""IndexTTS2's S2Mel (``s2mel.pth``): semantic content -> 80-band mel at 22.05 kHz / 256.

``s2mel.pth`` is ``{"net": {"cfm": ..., "length_regulator": ..., "gpt_layer": ...}}``, the
state dicts of upstream ``MyModel``'s three children (``indextts/s2mel/modules/commons.py``);
:class:`S2Mel` has the same three children, so the file loads strictly under the same names:

- ``gpt_layer``: three linears without activations, the GPT's latent (1280) -> codec width (1024),
  added to the codes' ``vq2emb`` vectors (:meth:`S2Mel.project_latent`).
- ``length_regulator``: upstream ``InterpolateRegulator`` for continuous content: a linear, nearest
  interpolation to the target frame count, then (conv k3, GroupNorm of one group, Mish) per
  sampling ratio and a 1x1 conv.
- ``cfm``: conditional flow matching (``CFM``, ``flow_matching.py``) around the DiT of
  :mod:`ttscli.models.indextts2.dit`: Euler steps on a linear time grid; the prompt frames of
  ``x`` are held at zero and the reference mel is given beside them as ``prompt_x``;
  classifier-free guidance as a batch of two, the second row seeing zero prompt, content and style.
  Only the target frames' velocity is computed (``DiT.velocity(start=)``): upstream zeroes the
  prompt frames after every step, so theirs is never used.

Configuration: the ``s2mel`` section of the model's ``config.yaml`` (:class:`S2MelArgs`); fields
the yaml leaves out take upstream's defaults, or the published ``config.yaml``'s values where
upstream has none. ``gpt_layer``'s widths are not in the yaml (upstream hard-codes them): they
are read from the checkpoint's tensors.

Channels-last ``[B, T, C]`` throughout.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx import nn

from ttscli.checkpoint import fold_weight_norm, load_strict
from ttscli.codecs.s3gen.flow import mish
from ttscli.config import BaseArgs
from ttscli.errors import CheckpointError
from ttscli.models.indextts2.dit import DiT
from ttscli.nn.conv import Conv1d, pad_time

# ----------------------------------------------------------------------------- config


@dataclass
class SpectArgs(BaseArgs):
    n_fft: int = 1024
    win_length: int = 1024
    hop_length: int = 256
    n_mels: int = 80
    fmin: float = 0
    fmax: float | str | None = "None"     # upstream's spelling of "up to Nyquist"


@dataclass
class PreprocessArgs(BaseArgs):
    sr: int = 22050
    spect_params: SpectArgs = field(default_factory=SpectArgs)


@dataclass
class StyleEncoderArgs(BaseArgs):
    dim: int = 192


@dataclass
class LengthRegulatorArgs(BaseArgs):
    channels: int = 512
    is_discrete: bool = False
    in_channels: int = 1024
    content_codebook_size: int = 2048
    sampling_ratios: list[int] = field(default_factory=lambda: [1, 1, 1, 1])
    vector_quantize: bool = False
    n_codebooks: int = 1
    quantizer_dropout: float = 0.0
    f0_condition: bool = False
    n_f0_bins: int = 512


@dataclass
class DiTArgs(BaseArgs):
    hidden_dim: int = 512
    num_heads: int = 8
    depth: int = 13
    class_dropout_prob: float = 0.1
    block_size: int = 8192
    in_channels: int = 80
    style_condition: bool = True
    final_layer_type: str = "wavenet"
    target: str = "mel"
    content_dim: int = 512
    content_codebook_size: int = 1024
    content_type: str = "discrete"
    f0_condition: bool = False
    n_f0_bins: int = 512
    content_codebooks: int = 1
    is_causal: bool = False
    long_skip_connection: bool = True
    zero_prompt_speech_token: bool = False
    time_as_token: bool = False
    style_as_token: bool = False
    uvit_skip_connection: bool = False
    add_resblock_in_transformer: bool = False


@dataclass
class WaveNetArgs(BaseArgs):
    hidden_dim: int = 512
    num_layers: int = 8
    kernel_size: int = 5
    dilation_rate: int = 1
    p_dropout: float = 0.2
    style_condition: bool = True


@dataclass
class S2MelArgs(BaseArgs):
    """The ``s2mel`` section of ``config.yaml``, plus ``gpt_layer``: the widths of the three
    linears (in, hidden, hidden, out), upstream's hard-coded 1280 -> 256 -> 128 -> 1024 unless
    a checkpoint says otherwise (:func:`load_s2mel` reads them from its tensors)."""
    preprocess_params: PreprocessArgs = field(default_factory=PreprocessArgs)
    dit_type: str = "DiT"
    reg_loss_type: str = "l1"
    style_encoder: StyleEncoderArgs = field(default_factory=StyleEncoderArgs)
    length_regulator: LengthRegulatorArgs = field(default_factory=LengthRegulatorArgs)
    DiT: DiTArgs = field(default_factory=DiTArgs)
    wavenet: WaveNetArgs = field(default_factory=WaveNetArgs)
    gpt_layer: list[int] = field(default_factory=lambda: [1280, 256, 128, 1024])


def unsupported(args: S2MelArgs) -> list[str]:
    """The settings this implementation does not build (none of them in the published config)."""
    d, r = args.DiT, args.length_regulator
    checks = [
        (args.dit_type != "DiT", f"dit_type {args.dit_type!r}"),
        (d.time_as_token, "DiT.time_as_token"),
        (d.style_as_token, "DiT.style_as_token"),
        (d.zero_prompt_speech_token, "DiT.zero_prompt_speech_token"),
        (d.final_layer_type not in ("wavenet", "mlp"), f"DiT.final_layer_type {d.final_layer_type!r}"),
        (d.final_layer_type == "wavenet" and d.hidden_dim != args.wavenet.hidden_dim,
         "DiT.hidden_dim != wavenet.hidden_dim with a wavenet final layer"),
        (r.is_discrete, "length_regulator.is_discrete"),
        (r.vector_quantize, "length_regulator.vector_quantize"),
        (r.n_codebooks != 1, "length_regulator.n_codebooks != 1"),
        (r.f0_condition, "length_regulator.f0_condition"),
        (not r.sampling_ratios, "length_regulator without sampling_ratios (no interpolation)"),
        (len(args.gpt_layer) != 4, "gpt_layer widths other than 3 linears"),
    ]
    return [what for bad, what in checks if bad]


def code_frames(n_codes: int) -> int:
    """Mel frames for ``n_codes`` semantic codes: upstream's ``int(n * 1.72)`` (float32 in torch),
    in exact integer arithmetic, which agrees with it for every whole code count."""
    return n_codes * 172 // 100


# ----------------------------------------------------------------------------- length regulator


def nearest_indices(n_in: int, n_out: int) -> np.ndarray:
    """Source frame of each output frame under torch's ``interpolate(mode="nearest", size=n_out)``:
    ``floor(i * (n_in / n_out))`` in float32, clamped to the last frame."""
    if n_in == n_out:
        return np.arange(n_out, dtype=np.int32)
    scale = np.float32(n_in) / np.float32(n_out)
    idx = np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(idx, n_in - 1).astype(np.int32)


class GroupNorm(nn.Module):
    """``nn.GroupNorm(1, C)``: statistics over all frames and channels of a row, per-channel affine."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.weight = mx.ones((channels,))
        self.bias = mx.zeros((channels,))
        self.eps = eps

    def __call__(self, x: mx.array) -> mx.array:
        B, T, C = x.shape
        y = mx.fast.layer_norm(x.reshape(B, T * C), None, None, self.eps).reshape(B, T, C)
        return y * self.weight + self.bias


class Mish(nn.Module):
    def __call__(self, x: mx.array) -> mx.array:
        return mish(x)


class InterpolateRegulator(nn.Module):
    """Content ``[B, T, in_channels]`` -> ``[B, frames, channels]`` (continuous content only)."""

    def __init__(self, a: LengthRegulatorArgs):
        super().__init__()
        ch = a.channels
        self.model = []
        for _ in a.sampling_ratios:
            self.model += [Conv1d(ch, ch, 3, padding=1), GroupNorm(ch), Mish()]
        self.model.append(Conv1d(ch, ch, 1))
        # the discrete-content path's tables: unused for continuous content, kept for the checkpoint
        self.embedding = nn.Embedding(a.content_codebook_size, ch)
        self.mask_token = mx.zeros((1, ch))
        self.content_in_proj = nn.Linear(a.in_channels, ch)

    def __call__(self, content: mx.array, frames: int) -> mx.array:
        if frames < 1:
            raise ValueError(f"the length regulator needs at least one output frame, got {frames}")
        x = self.content_in_proj(content)
        x = mx.take(x, mx.array(nearest_indices(x.shape[1], frames)), axis=1)
        for layer in self.model:
            x = layer(x)
        return x


# ----------------------------------------------------------------------------- flow matching


def linspace_f32(n: int) -> np.ndarray:
    """``torch.linspace(0, 1, n)`` in float32, as torch computes it (the first half counted up
    from 0, the second down from 1, by a float32 step)."""
    if n == 1:
        return np.zeros(1, np.float32)
    step = np.float32(1.0) / np.float32(n - 1)
    i = np.arange(n, dtype=np.float32)
    up = i * step
    down = np.float32(1.0) - step * (np.float32(n - 1) - i)
    return np.where(np.arange(n) < n // 2, up, down).astype(np.float32)


class CFM(nn.Module):
    """Upstream ``CFM``: the DiT estimator and its Euler solver."""

    def __init__(self, args: S2MelArgs):
        super().__init__()
        self.in_channels = args.DiT.in_channels
        self.estimator = DiT(args)
        # the same velocity on another runtime (onnx_s2mel.OnnxVelocity), called in its place
        self.external_velocity = None

    def inference(self, mu: mx.array, ref_mel: mx.array, style: mx.array, noise: mx.array,
                  steps: int = 25, cfg_rate: float = 0.7) -> mx.array:
        """Euler integration of the flow from ``noise`` to a mel.

        ``mu [B, T, content]``: the regulated content of prompt and target frames;
        ``ref_mel [B, P, 80]``: the reference mel (the first P frames are the prompt);
        ``style [B, style_dim]``; ``noise [B, T, 80]``: the starting point (upstream draws it with
        ``torch.randn``; its first P frames are not used). Returns ``[B, T, 80]`` with the P prompt
        frames zero; the caller keeps ``[:, P:]``. ``cfg_rate`` 0 runs the conditional row alone.
        """
        B, T, _ = mu.shape
        P = ref_mel.shape[1]
        if P > T:
            raise ValueError(f"the prompt mel ({P} frames) is longer than the content ({T} frames)")
        est = self.estimator
        dtype = mu.dtype
        if P == T:
            return mx.zeros((B, T, self.in_channels), dtype)
        prompt_x = pad_time(ref_mel[:, :P].astype(dtype), 0, T - P)
        x = pad_time(noise[:, P:].astype(dtype), P, 0)
        style = style.astype(dtype)
        if cfg_rate > 0:
            cond = est.condition(mx.concatenate([prompt_x, mx.zeros_like(prompt_x)]),
                                 mx.concatenate([mu, mx.zeros_like(mu)]),
                                 mx.concatenate([style, mx.zeros_like(style)]))
        else:
            cond = est.condition(prompt_x, mu, style)
        velocity = functools.partial(self.external_velocity or est.velocity, start=P)
        ts = linspace_f32(steps + 1)
        t = ts[0]
        for s in range(1, steps + 1):
            dt = np.float32(ts[s] - ts[s - 1])
            tt = mx.array([float(t)], dtype=mx.float32)
            # only the target frames' velocity is asked for: the prompt frames of x stay zero
            if cfg_rate > 0:
                v = velocity(mx.concatenate([x, x]), tt, cond)
                v = (1.0 + cfg_rate) * v[:B] - cfg_rate * v[B:]
            else:
                v = velocity(x, tt, cond)
            x = pad_time(x[:, P:] + float(dt) * v, P, 0)
            t = np.float32(t + dt)
            mx.eval(x)
        return x


# ----------------------------------------------------------------------------- the model


class S2Mel(nn.Module):
    """``cfm``, ``length_regulator`` and ``gpt_layer``: the parameter trees of ``s2mel.pth``'s ``net``."""

    def __init__(self, args: S2MelArgs):
        super().__init__()
        bad = unsupported(args)
        if bad:
            raise CheckpointError("s2mel settings not supported: " + ", ".join(bad))
        self.args = args
        self.cfm = CFM(args)
        self.length_regulator = InterpolateRegulator(args.length_regulator)
        dims = args.gpt_layer
        self.gpt_layer = [nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:])]

    def project_latent(self, latent: mx.array) -> mx.array:
        """The GPT's latent ``[B, n, gpt_dim]`` -> ``[B, n, codec_dim]`` (``gpt_layer``)."""
        for layer in self.gpt_layer:
            latent = layer(latent)
        return latent


PARTS = ("cfm", "length_regulator", "gpt_layer")
# both halves of a weight-normed tensor, each with the other's suffix, in torch's two spellings
WEIGHT_NORM_HALVES = tuple((a, b) for g, v in ((".weight_g", ".weight_v"),
                                                 (".parametrizations.weight.original0",
                                                  ".parametrizations.weight.original1"))
                           for a, b in ((g, v), (v, g)))


def read_s2mel(path: str | Path) -> dict[str, np.ndarray]:
    """``s2mel.pth``'s ``net`` as one flat dict ``part.name -> array`` (a ``module.`` prefix, which
    upstream's loader strips, is stripped too)."""
    from ttscli import torchfile

    obj = torchfile.load(path)
    net = obj.get("net") if isinstance(obj, dict) else None
    if not isinstance(net, dict):
        raise CheckpointError(f"{path}: expected a dict with a 'net' entry (IndexTTS2's s2mel.pth)")
    missing = [p for p in PARTS if not isinstance(net.get(p), dict)]
    if missing:
        raise CheckpointError(f"{path}: net has no {', '.join(missing)} (expected {', '.join(PARTS)})")
    extra = sorted(set(net) - set(PARTS))
    if extra:
        raise CheckpointError(f"{path}: unexpected entries under net: {', '.join(map(str, extra))}")
    out = {}
    for part in PARTS:
        for k, v in net[part].items():
            if not isinstance(v, np.ndarray):
                raise CheckpointError(f"{path}: net.{part}.{k} is not a tensor")
            out[f"{part}.{k.removeprefix('module.')}"] = v
    return out


def gpt_layer_widths(weights: dict, source: str) -> list[int]:
    """``[in, h1, h2, out]`` from ``gpt_layer.{0,1,2}.weight``."""
    shapes = [weights.get(f"gpt_layer.{i}.weight") for i in range(3)]
    if any(s is None or s.ndim != 2 for s in shapes):
        raise CheckpointError(f"{source}: net.gpt_layer should hold three linears 0, 1, 2 (weight [out, in])")
    return [int(shapes[0].shape[1])] + [int(s.shape[0]) for s in shapes]


def load_s2mel(path: str | Path, args: S2MelArgs) -> S2Mel:
    """``s2mel.pth`` -> :class:`S2Mel`, every tensor checked by name and shape (weight norm folded)."""
    return s2mel_from_weights(read_s2mel(path), args, source=str(path))


def s2mel_from_weights(weights: dict, args: S2MelArgs, source: str = "s2mel.pth") -> S2Mel:
    """:class:`S2Mel` from ``part.name -> array`` as :func:`read_s2mel` gives them (weight-normed
    pairs unfolded); ``gpt_layer``'s widths are taken from its tensors. A missing, unexpected or
    mis-shaped tensor is one CheckpointError naming it (``net.`` + its name in the file)."""
    args = dataclasses.replace(args, gpt_layer=gpt_layer_widths(weights, source))
    pos = weights.get("cfm.estimator.input_pos")
    if pos is not None and np.ndim(pos) == 1 and not np.array_equal(np.asarray(pos), np.arange(np.shape(pos)[0])):
        raise CheckpointError(f"{source}: net.cfm.estimator.input_pos should be the positions 0, 1, 2, ...")
    for k in weights:
        for mine, other in WEIGHT_NORM_HALVES:
            if k.endswith(mine) and k[: -len(mine)] + other not in weights:
                raise CheckpointError(f"{source}: net.{k} has no net.{k[: -len(mine)] + other} "
                                      "(a weight-normed tensor comes as a pair)")
    folded = fold_weight_norm(weights)
    return load_strict(S2Mel(args), {k: mx.array(v) for k, v in folded.items()}, source=source, where="net.",
                       dtype="float32")


def random_s2mel(args: S2MelArgs, seed: int = 0) -> S2Mel:
    """:class:`S2Mel` at ``args``' sizes with deterministic random weights (bench, tests)."""
    from ttscli.nn.init import random_weights

    return random_weights(S2Mel(args), seed=seed)
