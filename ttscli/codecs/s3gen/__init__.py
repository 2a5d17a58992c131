"""S3Gen, the CosyVoice lineage's token-to-wav: 25 Hz speech tokens -> 24 kHz audio, and the
reference front ends it needs. A shared codec: it imports no family (Chatterbox uses it today).

Its interface:

* :func:`load_s3gen` reads the published ``S3Token2Wav`` layout (``flow.*``, ``mel2wav.*``,
  ``speaker_encoder.*``, ``tokenizer.*`` in one safetensors file, which Chatterbox ships as
  ``s3gen.safetensors``) into an :class:`S3Gen`.
* :meth:`S3Gen.embed_ref` turns a reference recording into the conditioning upstream's
  ``S3Token2Mel.embed_ref`` returns (prompt tokens, prompt mel, CAMPPlus x-vector).
* :meth:`S3Gen.tokenize` gives the S3 speech tokens of a 16 kHz recording (T3's prompt tokens).
* :meth:`S3Gen.generate` runs flow (conformer encoder + causal CFM) and HiFT on speech tokens.
* :meth:`S3Gen.stream` yields the same audio in pieces as tokens arrive in chunks;
  :attr:`S3Gen.first_audio_tokens` is the smallest first chunk that already yields audio.
* :class:`S3GenTimes`, passed to either, adds up the seconds spent in the flow and in HiFT.

Everything runs in float32 unless ``dtype`` says otherwise; arrays in and out are numpy.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np

from ttscli.checkpoint import load_strict, read_safetensors
from ttscli.errors import CheckpointError

from .flow import CausalMaskedDiffWithXvec, FlowArgs
from .frontend import prompt_mel, resample
from .hift import HiFTArgs, HiFTGenerator, SourceDraws, fold_weight_norm
from .tokenizer import S3TokenizerArgs, S3TokenizerV2
from .tokenizer import sanitize as sanitize_tokenizer
from .xvector import CAMPPlus, CAMPPlusArgs, campplus_args

SAMPLE_RATE = 24000          # S3Gen output and prompt-mel rate
S3_SR = 16000                # S3 tokenizer and CAMPPlus input rate
TOKEN_RATE = 25              # speech tokens per second
SAMPLES_PER_TOKEN = SAMPLE_RATE // TOKEN_RATE   # 960
SPEECH_VOCAB = 6561
FILE = "s3gen.safetensors"   # the file those weights are published in (Chatterbox's checkpoint)
VOC_CONTEXT = 8               # mel frames of vocoder context on each side of a streamed piece
# streamed hops as CosyVoice2/3 schedule them (cosyvoice/cli/model.py: stream_scale_factor 2,
# token_max_hop_len 4 s): each hop after the first twice the one before, up to 100 tokens
HOP_SCALE = 2
MAX_HOP_TOKENS = 100


def next_hop(hop: int) -> int:
    """The hop after one of ``hop`` tokens: twice as long, up to :data:`MAX_HOP_TOKENS` (a hop
    already longer stays as it is). Each pass re-runs the flow over everything so far, so growing
    hops make a long stream's passes a few instead of one per 25 tokens, while every pass still
    finishes before the audio already released has played."""
    return max(hop, min(MAX_HOP_TOKENS, hop * HOP_SCALE))


def hop_tokens(first: int, hop: int, k: int) -> int:
    """Tokens in streamed chunk ``k`` (from 0): ``first``, then ``hop``, then each
    :func:`next_hop` of the one before."""
    if k == 0:
        return first
    for _ in range(k - 1):
        hop = next_hop(hop)
    return hop


def trim_fade() -> np.ndarray:
    """Upstream's fade-in of the first 40 ms: 20 ms of silence, then a 20 ms raised cosine."""
    n = SAMPLE_RATE // 50
    fade = np.zeros(2 * n, np.float32)
    fade[n:] = (np.cos(np.linspace(np.pi, 0, n, dtype=np.float32)) + 1) / 2
    return fade


@dataclass
class S3GenTimes:
    """Seconds spent in S3Gen, added up over every pass of a stream (or the one of ``generate``):
    ``flow_s`` the conformer encoder and the CFM (with its noise), ``hift_s`` the vocoder
    (F0, harmonic source, decode) and the trim-fade; ``passes`` counts flow runs."""

    flow_s: float = 0.0
    hift_s: float = 0.0
    passes: int = 0

    @property
    def total_s(self) -> float:
        return self.flow_s + self.hift_s


class S3Gen:
    """Speech tokens -> 24 kHz waveform (flow + HiFT), plus the reference front ends.

    Built by :func:`load_s3gen`; holds the MLX modules ``flow``, ``mel2wav`` (HiFT),
    ``speaker_encoder`` (CAMPPlus) and ``tokenizer`` (S3TokenizerV2) named as in the checkpoint.
    """

    sample_rate = SAMPLE_RATE

    def __init__(self, flow: CausalMaskedDiffWithXvec, mel2wav: HiFTGenerator, tokenizer: S3TokenizerV2,
                 speaker_encoder: CAMPPlus):
        self.flow, self.mel2wav, self.tokenizer = flow, mel2wav, tokenizer
        self.speaker_encoder = speaker_encoder

    @property
    def first_audio_tokens(self) -> int:
        """The fewest tokens a first streamed chunk needs for its pass to yield audio: the
        flow's lookahead (those tokens' frames wait for the next chunk), the vocoder's right
        context ``VOC_CONTEXT`` in tokens, and one token whose frames are then final."""
        a = self.flow.a
        return a.pre_lookahead_len + VOC_CONTEXT // a.token_mel_ratio + 1

    def embed_ref(self, wav: np.ndarray, sample_rate: int) -> dict:
        """Conditioning from a reference recording, as upstream ``embed_ref``.

        ``wav``: mono float32 at ``sample_rate`` (any rate; resampled to 24 kHz and to 16 kHz
        with torchaudio's sinc resampler as the reference does). Pass at most 10 s (upstream
        only warns; Chatterbox's pipeline cuts its reference to 10 s first).

        Returns a dict of numpy arrays: ``prompt_token`` int32 ``[1, T_tok]``,
        ``prompt_token_len`` int32 ``[1]``, ``prompt_feat`` float32 ``[1, 2*T_tok, 80]``
        (log-mel of the 24 kHz reference), ``embedding`` float32 ``[1, 192]`` (CAMPPlus x-vector).
        """
        wav = np.asarray(wav, np.float32).reshape(-1)
        wav24 = resample(wav, sample_rate, SAMPLE_RATE)
        wav16 = resample(wav, sample_rate, S3_SR)
        feat = prompt_mel(wav24)
        tokens = self.tokenizer(wav16)
        if feat.shape[0] != 2 * tokens.shape[0]:
            tokens = tokens[: feat.shape[0] // 2]
        return {"prompt_token": tokens[None].astype(np.int32),
                "prompt_token_len": np.array([tokens.shape[0]], np.int32),
                "prompt_feat": feat[None], "embedding": self.speaker_encoder.embed(wav16)[None]}

    def tokenize(self, wav16k: np.ndarray, max_tokens: int | None = None) -> np.ndarray:
        """S3 speech tokens (int32 ``[T_tok]``, 25 Hz, values < 6561) of a mono 16 kHz float32
        recording; ``max_tokens`` truncates as upstream's ``max_len`` does (T3 uses 150)."""
        return self.tokenizer(np.asarray(wav16k, np.float32).reshape(-1), max_len=max_tokens)

    def mel(self, tokens: np.ndarray, ref: dict, *, n_timesteps: int = 10, noise: np.ndarray | None = None,
            finalize: bool = True, key: mx.array | None = None) -> mx.array:
        """The flow's mel ``[2 T_tok, 80]`` (``[2 (T_tok - 3), 80]`` when not ``finalize``)."""
        tokens = np.asarray(tokens).reshape(-1)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= SPEECH_VOCAB):
            raise ValueError(f"speech tokens must lie in 0..{SPEECH_VOCAB - 1}")
        nz = None if noise is None else mx.array(np.asarray(noise, np.float32).reshape(80, -1).T)
        return self.flow(mx.array(tokens.astype(np.int32)), mx.array(np.asarray(ref["prompt_token"]).reshape(-1)),
                         mx.array(np.asarray(ref["prompt_feat"], np.float32).reshape(-1, 80)),
                         mx.array(np.asarray(ref["embedding"], np.float32).reshape(-1)),
                         nz, finalize=finalize, n_timesteps=n_timesteps, key=key)

    def generate(self, tokens: np.ndarray, ref: dict, *, n_timesteps: int = 10,
                 noise: np.ndarray | None = None, key: mx.array | None = None,
                 source_draws: SourceDraws | None = None, times: S3GenTimes | None = None) -> np.ndarray:
        """24 kHz float32 waveform ``[T_tok * 960]`` of speech ``tokens`` (int, ``[T_tok]``,
        values < 6561) in the voice of ``ref`` (from :meth:`embed_ref`).

        ``n_timesteps`` Euler steps of the CFM on the cosine schedule with CFG 0.7.
        ``noise``: the CFM's starting noise ``[1, 80, T_mel_total]`` (prompt + generated mel
        frames); None draws it from MLX's generator (or from ``key``). ``source_draws``: HiFT's
        harmonic-source phases and noise (None: drawn likewise). Upstream's trim-fade of the
        first 40 ms is applied. ``times`` (if given) gains this call's flow and HiFT seconds.
        """
        t0 = time.perf_counter()
        k1, k2 = mx.random.split(key) if key is not None else (None, None)
        mel = self.mel(tokens, ref, n_timesteps=n_timesteps, noise=noise, key=k1)
        mx.eval(mel)      # the flow apart from HiFT, for the timings (the same graph either way)
        t1 = time.perf_counter()
        wav, _ = self.mel2wav(mel, source_draws, k2)
        wav = np.array(wav, np.float32)
        fade = trim_fade()
        n = min(fade.size, wav.size)
        wav[:n] *= fade[:n]
        if times is not None:
            times.flow_s += t1 - t0
            times.hift_s += time.perf_counter() - t1
            times.passes += 1
        return wav

    def stream(self, token_chunks: Iterable, ref: dict, *, n_timesteps: int = 10,
               noise: np.ndarray | None = None, key: mx.array | None = None,
               source_draws: SourceDraws | None = None, times: S3GenTimes | None = None) -> Iterator[np.ndarray]:
        """Yield 24 kHz float32 audio pieces as chunks of speech tokens arrive.

        Each chunk re-runs the flow over every token so far (the CFM's attention is
        bidirectional) with ``finalize=False`` until the last chunk, so the newest 3 tokens wait
        for their lookahead; mel frames once produced are kept. HiFT's harmonic source is
        computed over the whole mel so far (its phase is an integral from the start) and the
        vocoder runs on the new frames plus ``VOC_CONTEXT`` frames of left context, holding back
        ``VOC_CONTEXT`` frames on the right until more mel arrives. The CFM noise and the
        source's draws are one sequence for the whole stream (``noise``/``source_draws`` as in
        :meth:`generate`, long enough for the total; else drawn once per frame as needed).

        A list or tuple of chunks is known to end at its last chunk, which is then the final
        pass; chunks from an iterator (tokens as T3 samples them) are processed as they come,
        and the final pass runs (on no new tokens) once the iterator ends, unless the iterator
        marks its last chunk by yielding ``(tokens, True)`` (then that chunk's pass is the final
        one and the iterator is not read further; ``(tokens, False)`` is a plain chunk).

        The first pass yields audio when the first chunk holds at least
        :attr:`first_audio_tokens` tokens (or is the last); later chunks of any size do.
        ``times`` (if given) gains each pass's flow and HiFT seconds.

        Against :meth:`generate` on the concatenated tokens with the same noise and draws:
        identical length; the vocoder part alone is exact to float rounding; the mel of frames
        emitted before later tokens arrived differs (later tokens reach them through attention),
        which ``tests/codecs/s3gen/test_s3gen_model.py`` bounds.
        """
        st = S3GenStream(self, ref, n_timesteps=n_timesteps, noise=noise, key=key, source_draws=source_draws,
                         times=times)
        for chunk, last in _marked(token_chunks):
            piece = st.push(chunk, last)
            if piece is not None:
                yield piece


class S3GenStream:
    """:meth:`S3Gen.stream` fed one chunk at a time: ``push(tokens, last)`` runs that chunk's
    pass and returns its audio piece (None when the pass yields none). Push-style so that a
    caller that gets tokens between other work (rows of a batch) streams with the same passes."""

    def __init__(self, s3: S3Gen, ref: dict, *, n_timesteps: int = 10, noise: np.ndarray | None = None,
                 key: mx.array | None = None, source_draws: SourceDraws | None = None,
                 times: S3GenTimes | None = None):
        self.s3, self.ref, self.n_timesteps, self.times = s3, ref, n_timesteps, times
        self.k1, self.k2 = mx.random.split(key) if key is not None else (None, None)
        self.n_prompt = int(np.asarray(ref["prompt_token"]).size)
        self.noise_buf = None if noise is None else np.asarray(noise, np.float32).reshape(80, -1)
        self.tokens = np.zeros(0, np.int64)
        self.mel = np.zeros((0, 80), np.float32)
        self.draws = source_draws
        self.done = 0          # mel frames already vocoded and returned
        self.fade = trim_fade()

    def push(self, chunk: np.ndarray, last: bool) -> np.ndarray | None:
        s3, a = self.s3, self.s3.mel2wav.a
        hop = a.upsample_scale
        t0 = time.perf_counter()
        self.tokens = np.concatenate([self.tokens, np.asarray(chunk).reshape(-1)])
        total = 2 * (self.n_prompt + self.tokens.size)
        if self.noise_buf is None or self.noise_buf.shape[1] < total:
            extra = total - (0 if self.noise_buf is None else self.noise_buf.shape[1])
            self.k1, sub = mx.random.split(self.k1) if self.k1 is not None else (None, None)
            fresh = np.array(mx.random.normal((80, extra), key=sub), np.float32)
            self.noise_buf = fresh if self.noise_buf is None else np.concatenate([self.noise_buf, fresh], axis=1)
        if not last and self.tokens.size <= s3.flow.a.pre_lookahead_len:
            return None
        new = np.array(s3.mel(self.tokens, self.ref, n_timesteps=self.n_timesteps,
                              noise=self.noise_buf[:, :total], finalize=last))
        mel = self.mel = np.concatenate([self.mel, new[self.mel.shape[0]:]])
        t1 = time.perf_counter()
        if self.times is not None:
            self.times.flow_s += t1 - t0
            self.times.passes += 1
        done = self.done
        end = mel.shape[0] if last else max(done, mel.shape[0] - VOC_CONTEXT)
        if end <= done:
            return None
        draws = self.draws
        if draws is None or draws.noise.shape[0] < mel.shape[0] * hop:
            self.k2, sub = mx.random.split(self.k2) if self.k2 is not None else (None, None)
            grown = SourceDraws.draw(mel.shape[0] * hop + (0 if last else 64 * hop), a.nb_harmonics + 1, sub)
            draws = self.draws = grown if draws is None else SourceDraws(
                draws.phase, mx.concatenate([draws.noise, grown.noise[draws.noise.shape[0]:]]))
        mel_mx = mx.array(mel)
        _, source = s3.mel2wav.source(mel_mx, SourceDraws(draws.phase, draws.noise[: mel.shape[0] * hop]))
        lo = max(0, done - VOC_CONTEXT)
        hi = min(mel.shape[0], end + (0 if last else VOC_CONTEXT))
        wav = s3.mel2wav.decode(mel_mx[lo:hi], source[lo * hop: hi * hop])
        piece = np.array(wav[(done - lo) * hop: (end - lo) * hop], np.float32)
        start = done * hop
        if start < self.fade.size:
            n = min(self.fade.size - start, piece.size)
            piece[:n] *= self.fade[start: start + n]
        self.done = end
        if self.times is not None:
            self.times.hift_s += time.perf_counter() - t1
        return piece


def _marked(chunks: Iterable) -> Iterator[tuple[np.ndarray, bool]]:
    """(chunk, is_last): a sequence's last chunk is marked; an iterator marks its own with
    ``(tokens, True)``, else its end adds an empty last one."""
    if isinstance(chunks, (list, tuple)):
        for i, c in enumerate(chunks):
            yield np.asarray(c).reshape(-1), i == len(chunks) - 1
        return
    for c in chunks:
        c, last = c if isinstance(c, tuple) else (c, False)
        yield np.asarray(c).reshape(-1), bool(last)
        if last:
            return
    yield np.zeros(0, np.int64), True


# ----------------------------------------------------------------------------- loading


def _count(weights: dict, prefix: str) -> int:
    pat = re.compile(re.escape(prefix) + r"(\d+)\.")
    return len({int(m.group(1)) for k in weights if (m := pat.match(k))})


def flow_args(w: dict) -> FlowArgs:
    """The flow's sizes, read off its tensors (``w`` without the ``flow.`` prefix). The
    estimator's head width is not in any shape: it is taken equal to the encoder's (64 in the
    published model, whose estimator has 8 heads of 64)."""
    vocab, d = w["input_embedding.weight"].shape
    heads, dk = w["encoder.encoders.0.self_attn.pos_bias_u"].shape
    est = "decoder.estimator."
    ch = w[est + "down_blocks.0.0.block1.block.0.weight"].shape[0]
    inner = w[est + "down_blocks.0.1.0.attn1.to_q.weight"].shape[0]
    return FlowArgs(
        vocab_size=vocab, input_size=d, output_size=w["encoder_proj.weight"].shape[0],
        spk_embed_dim=w["spk_embed_affine_layer.weight"].shape[1],
        pre_lookahead_len=w["encoder.pre_lookahead_layer.conv1.weight"].shape[2] - 1,
        attention_heads=heads, linear_units=w["encoder.encoders.0.feed_forward.w_1.weight"].shape[0],
        num_blocks=_count(w, "encoder.encoders."), num_up_blocks=_count(w, "encoder.up_encoders."),
        dec_channels=ch, dec_heads=inner // dk, dec_head_dim=dk,
        dec_n_blocks=_count(w, est + "down_blocks.0.1."), dec_mid_blocks=_count(w, est + "mid_blocks."))


def hift_args(w: dict) -> HiFTArgs:
    return HiFTArgs(base_channels=w["conv_pre.weight"].shape[0],
                    f0_channels=w["f0_predictor.condnet.0.weight"].shape[0])


def tokenizer_args(w: dict) -> S3TokenizerArgs:
    n = w["encoder.conv1.weight"].shape[0]
    # the rotary embedding is 64 wide and covers a whole head: heads of 64
    return S3TokenizerArgs(n_mels=w["encoder.conv1.weight"].shape[1], n_audio_state=n, n_audio_head=n // 64,
                           n_audio_layer=_count(w, "encoder.blocks."))


def _split(weights: dict, source: str) -> dict[str, dict]:
    parts = {p: {} for p in ("flow", "mel2wav", "tokenizer", "speaker_encoder")}
    for k, v in weights.items():
        head, _, rest = k.partition(".")
        if head not in parts:
            raise CheckpointError(f"{source}: unexpected tensor {k} (expected flow.*, mel2wav.*, tokenizer.*, "
                                  "speaker_encoder.*)")
        parts[head][rest] = v
    for p, w in parts.items():
        if not w:
            raise CheckpointError(f"{source}: no {p}.* tensors (is this Chatterbox's s3gen.safetensors?)")
    return parts


def _random_like(module, seed: int = 0) -> None:
    """Fan-in-scaled normal weights, unit norms: the real-size model for benchmarks."""
    from mlx.utils import tree_flatten

    mx.random.seed(seed)
    params = []
    for k, v in tree_flatten(module.parameters()):
        if k.endswith("num_batches_tracked"):
            continue
        if k.endswith(("bias", "pos_bias_u", "pos_bias_v", "running_mean")):
            params.append((k, mx.zeros(v.shape)))
        elif v.ndim == 1:
            params.append((k, mx.ones(v.shape)))
        else:
            fan_in = int(np.prod(v.shape[1:])) if v.ndim > 1 else 1
            params.append((k, mx.random.normal(v.shape) / np.sqrt(fan_in)))
    module.load_weights(params, strict=False)
    mx.eval(module.parameters())


def load_s3gen(path: Path | None, dtype: str = "float32", random_weights: bool = False) -> S3Gen:
    """An :class:`S3Gen` from ``path`` (``s3gen.safetensors`` or the folder holding it).

    ``random_weights=True`` (``path`` may then be None) builds the real-size model with
    random weights, for benchmarks and tests that need no checkpoint.
    A missing or mis-shaped tensor is one :class:`ttscli.errors.CheckpointError` line.
    """
    if random_weights:
        mods = (CausalMaskedDiffWithXvec(FlowArgs()), HiFTGenerator(HiFTArgs()),
                S3TokenizerV2(S3TokenizerArgs()), CAMPPlus(CAMPPlusArgs()))
        for i, m in enumerate(mods):
            _random_like(m, i)
        return S3Gen(*mods)
    if path is None:
        raise CheckpointError("load_s3gen: no path given (and random_weights is False)")
    path = Path(path)
    file = path / FILE if path.is_dir() else path
    if not file.is_file():
        raise CheckpointError(f"{file}: not found (Chatterbox's {FILE})")
    source = str(file)
    parts = _split(read_safetensors(file), source)
    def sized(part: str, build, args_of, w: dict):
        try:
            return build(args_of(w))
        except KeyError as e:
            raise CheckpointError(f"{source}: missing tensor {part}.{e.args[0]}") from None

    fw = parts["flow"]
    hw = fold_weight_norm(parts["mel2wav"])
    tw = sanitize_tokenizer(parts["tokenizer"])
    sw = parts["speaker_encoder"]
    flow = sized("flow", CausalMaskedDiffWithXvec, flow_args, fw)
    hift = sized("mel2wav", HiFTGenerator, hift_args, hw)
    tok = sized("tokenizer", S3TokenizerV2, tokenizer_args, tw)
    spk = sized("speaker_encoder", CAMPPlus, campplus_args, sw)
    load_strict(flow, fw, source=source, where="flow.", dtype=dtype)
    # HiFT stays float32: its F0 drives a phase integral, and upstream keeps the vocoder in fp32
    load_strict(hift, hw, source=source, where="mel2wav.", dtype="float32")
    load_strict(tok, tw, source=source, where="tokenizer.", dtype="float32")
    load_strict(spk, sw, source=source, where="speaker_encoder.", dtype="float32",
                keep_dtype=lambda k: k.endswith("num_batches_tracked"))
    return S3Gen(flow, hift, tok, spk)
