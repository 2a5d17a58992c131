"""The whole S3Gen (load_s3gen, front ends, tokenizer, x-vector, generate, stream) against
upstream chatterbox-tts 0.1.7 goldens of a tiny S3Token2Wav.

Fixtures from scripts/goldens/chatterbox_s3gen.py: tests/fixtures/chatterbox/tiny/s3gen.safetensors
(the published layout: flow.*, mel2wav.*, tokenizer.*, speaker_encoder.*) and
tests/fixtures/chatterbox/s3gen/s3gen_tiny.npz (synthetic voiced signals and what upstream made of
them; the random draws upstream made inside ``inference``).
"""
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import CheckpointError
from ttscli.codecs.s3gen import VOC_CONTEXT, load_s3gen
from ttscli.codecs.s3gen.frontend import prompt_mel, resample, s3_log_mel
from ttscli.codecs.s3gen.hift import SourceDraws
from ttscli.codecs.s3gen.xvector import kaldi_fbank

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "chatterbox"
TINY = ROOT / "tiny"


@pytest.fixture(scope="module")
def s3():
    return load_s3gen(TINY)


@pytest.fixture(scope="module")
def g():
    return dict(np.load(ROOT / "s3gen" / "s3gen_tiny.npz"))


def _draws(g):
    return SourceDraws(mx.array(g["phase"]), mx.array(g["sine_noise"].T))


# ------------------------------------------------------------------ front ends

def test_resample_as_torchaudio(g):
    assert np.abs(resample(g["ref24"], 24000, 16000) - g["ref24_to_16"]).max() <= 1e-6
    assert np.abs(resample(g["wav16"], 22050, 24000) - g["ref22_to_24"]).max() <= 1e-6


def test_mels(g):
    assert np.abs(s3_log_mel(g["wav16"]) - g["logmel16"].T).max() <= 1e-4
    assert np.abs(prompt_mel(g["ref24"]) - g["ref_prompt_feat"]).max() <= 1e-4


def test_kaldi_fbank(g):
    f = kaldi_fbank(g["ref24_to_16"])
    assert np.abs((f - f.mean(0)) - g["fbank"]).max() <= 2e-4


# ------------------------------------------------------------------ tokenizer, x-vector, embed_ref

def test_tokens_equal(s3, g):
    assert np.array_equal(s3.tokenize(g["wav16"]), g["tokens16"])
    assert np.array_equal(s3.tokenize(g["wav16"], max_tokens=20), g["tokens16_max20"])


def test_embed_ref(s3, g):
    ref = s3.embed_ref(g["ref24"], 24000)
    assert np.array_equal(ref["prompt_token"][0], g["ref_prompt_token"])
    assert np.abs(ref["prompt_feat"][0] - g["ref_prompt_feat"]).max() <= 1e-4
    assert np.abs(ref["embedding"][0] - g["ref_embedding"]).max() <= 1e-4


def test_embed_ref_other_rate(s3, g):
    # 16 kHz in: resampled up for the mel; the mel/token length mismatch truncates the tokens
    ref = s3.embed_ref(g["wav16"], 16000)
    assert np.array_equal(ref["prompt_token"][0], g["ref16_prompt_token"])
    assert np.abs(ref["prompt_feat"][0] - g["ref16_prompt_feat"]).max() <= 1e-4
    assert np.abs(ref["embedding"][0] - g["ref16_embedding"]).max() <= 1e-4


# ------------------------------------------------------------------ generate

def _ref(g):
    return {"prompt_token": g["ref_prompt_token"][None], "prompt_feat": g["ref_prompt_feat"][None],
            "embedding": g["ref_embedding"][None]}


def test_generate_waveform(s3, g):
    wav = s3.generate(g["speech_tokens"], _ref(g), noise=g["cfm_noise"][None], source_draws=_draws(g))
    assert wav.dtype == np.float32 and wav.shape == g["wav"].shape == (12 * 960,)
    assert np.abs(wav - g["wav"]).max() <= 1e-4
    assert np.all(wav[:480] == 0)        # upstream's trim-fade


def test_bad_tokens_are_refused(s3, g):
    with pytest.raises(ValueError, match="0..6560"):
        s3.generate(np.array([1, 6561]), _ref(g))


def test_load_errors(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        load_s3gen(tmp_path)
    w = mx.load(str(TINY / "s3gen.safetensors"))
    w.pop("flow.encoder_proj.weight")
    mx.save_safetensors(str(tmp_path / "s3gen.safetensors"), w)
    with pytest.raises(CheckpointError, match="flow.encoder_proj.weight"):
        load_s3gen(tmp_path)


# ------------------------------------------------------------------ streaming

def test_stream_matches_generate(s3, g):
    toks = g["speech_tokens"]
    noise = g["cfm_noise"][None]
    one = s3.generate(toks, _ref(g), noise=noise, source_draws=_draws(g))
    pieces = list(s3.stream([toks[:4], toks[4:8], toks[8:]], _ref(g), noise=noise, source_draws=_draws(g)))
    assert len(pieces) >= 2
    wav = np.concatenate(pieces)
    assert wav.shape == one.shape
    # frames made before later tokens existed differ (the CFM's attention is bidirectional), and
    # through F0 the harmonic source's phase integral carries that to later samples
    # so the samples are not comparable one by one (max abs 0.6 of the peak on this random
    # tiny model); the spectrogram is: measured mean |log-mel difference| 0.23, RMS ratio 0.996
    a, b = prompt_mel(one), prompt_mel(wav)
    assert np.abs(a - b).mean() <= STREAM_LOGMEL_TOLERANCE
    assert abs(np.sqrt((wav ** 2).mean() / (one ** 2).mean()) - 1) <= 0.05
    # and a stream that is cut differently is a different (equally valid) approximation
    wav2 = np.concatenate(list(s3.stream([toks[:6], toks[6:]], _ref(g), noise=noise, source_draws=_draws(g))))
    assert np.abs(prompt_mel(wav2) - a).mean() <= STREAM_LOGMEL_TOLERANCE


def test_stream_single_chunk_is_generate(s3, g):
    toks = g["speech_tokens"]
    one = s3.generate(toks, _ref(g), noise=g["cfm_noise"][None], source_draws=_draws(g))
    wav = np.concatenate(list(s3.stream([toks], _ref(g), noise=g["cfm_noise"][None], source_draws=_draws(g))))
    assert np.abs(wav - one).max() <= 1e-5


# Stated tolerance of streaming against one shot (same noise and draws), on the 80-mel of the
# 24 kHz output: mean absolute log-mel difference (natural log). Single-chunk streams are exact.
STREAM_LOGMEL_TOLERANCE = 0.35


def test_stream_from_an_iterator(s3, g):
    """Chunks from a generator are decoded as they come; the end of the stream finalizes."""
    toks = g["speech_tokens"]
    noise = g["cfm_noise"][None]
    seen = []

    def chunks():
        for c in (toks[:8], toks[8:10], toks[10:]):
            seen.append(len(c))
            yield c

    one = s3.generate(toks, _ref(g), noise=noise, source_draws=_draws(g))
    pieces = []
    for p in s3.stream(chunks(), _ref(g), noise=noise, source_draws=_draws(g)):
        pieces.append((len(seen), p))
    # 8 tokens: 2 * (8 - 3) mel frames, less the vocoder hold-back, are audio at once
    assert pieces[0][0] == 1 and pieces[0][1].size == (2 * (8 - 3) - VOC_CONTEXT) * 480
    wav = np.concatenate([p for _, p in pieces])
    assert wav.shape == one.shape
    assert np.abs(prompt_mel(wav) - prompt_mel(one)).mean() <= STREAM_LOGMEL_TOLERANCE


def test_bench_helper(s3):
    """benchmarks/bench_s3gen.py's timings (the benchmark lives outside the package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_s3gen.py"
    spec = importlib.util.spec_from_file_location("bench_s3gen", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    r = bench.bench_s3gen(s3, audio_seconds=0.4, prompt_seconds=0.4, n_timesteps=2, repeats=1)
    assert r["audio_s"] == pytest.approx(0.4)
    assert r["flow_s"] > 0 and r["hift_s"] > 0
    assert r["s3gen_s_per_audio_s"] == pytest.approx((r["flow_s"] + r["hift_s"]) / 0.4)


def test_first_audio_tokens(s3, g):
    """The smallest first chunk whose pass already yields audio, and one token fewer yields none."""
    n = s3.first_audio_tokens
    assert n == s3.flow.a.pre_lookahead_len + VOC_CONTEXT // s3.flow.a.token_mel_ratio + 1 == 8
    toks = g["speech_tokens"]

    def chunks(first, got):
        got.append("first")
        yield toks[:first]
        got.append("rest")
        yield toks[first:]

    for first, audible in ((n, True), (n - 1, False)):
        got = []
        it = s3.stream(chunks(first, got), _ref(g), noise=g["cfm_noise"][None], source_draws=_draws(g))
        piece = next(it)
        assert (got == ["first"]) == audible and piece.size > 0
        list(it)


def test_stream_marked_last_chunk(s3, g):
    """An iterator that marks its last chunk saves the extra final pass; same length, same tolerance."""
    from ttscli.codecs.s3gen import S3GenTimes

    toks = g["speech_tokens"]
    noise = g["cfm_noise"][None]
    one = s3.generate(toks, _ref(g), noise=noise, source_draws=_draws(g))
    plain, marked = S3GenTimes(), S3GenTimes()
    wav1 = np.concatenate(list(s3.stream(iter([toks[:8], toks[8:]]), _ref(g), noise=noise,
                                         source_draws=_draws(g), times=plain)))
    read = []

    def chunks():
        for c, last in ((toks[:8], False), (toks[8:], True), (toks[:1], False)):
            read.append(last)
            yield c, last

    wav2 = np.concatenate(list(s3.stream(chunks(), _ref(g), noise=noise, source_draws=_draws(g), times=marked)))
    assert read == [False, True]                  # not read past the marked chunk
    assert (plain.passes, marked.passes) == (3, 2)
    assert wav1.shape == wav2.shape == one.shape
    assert np.abs(prompt_mel(wav2) - prompt_mel(one)).mean() <= STREAM_LOGMEL_TOLERANCE
    assert marked.flow_s > 0 and marked.hift_s > 0


def test_generate_times(s3, g):
    from ttscli.codecs.s3gen import S3GenTimes

    times = S3GenTimes()
    s3.generate(g["speech_tokens"], _ref(g), noise=g["cfm_noise"][None], source_draws=_draws(g), times=times)
    s3.generate(g["speech_tokens"], _ref(g), noise=g["cfm_noise"][None], source_draws=_draws(g), times=times)
    assert times.passes == 2 and times.flow_s > 0 and times.hift_s > 0
    assert times.total_s == times.flow_s + times.hift_s


def test_streamed_hops_double_up_to_four_seconds():
    from ttscli.codecs.s3gen import hop_tokens, next_hop

    # CosyVoice2/3's schedule (token_hop_len 25, stream_scale_factor 2, token_max_hop_len 100)
    assert [hop_tokens(8, 25, k) for k in range(6)] == [8, 25, 50, 100, 100, 100]
    assert [hop_tokens(8, 2, k) for k in range(9)] == [8, 2, 4, 8, 16, 32, 64, 100, 100]
    assert next_hop(60) == 100 and next_hop(150) == 150       # a hop asked longer than 100 stays
