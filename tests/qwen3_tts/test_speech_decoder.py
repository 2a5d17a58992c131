"""Qwen3-TTS speech-tokenizer decoder vs goldens from upstream qwen-tts 0.1.1 (float32).

Fixture and goldens: scripts/goldens/qwen3_speech_decoder.py (tiny re-initialised
Qwen3TTSTokenizerV2Model: 16 quantizers, 3 layers with a 16-frame sliding window, real
upsampling rates -> 1920 samples per frame).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import ttscli  # noqa: F401  (BLAS preload before mlx)
import mlx.core as mx
from safetensors.numpy import load_file, save_file

from ttscli.errors import CheckpointError
from ttscli.codecs.qwen3_12hz import (
    DecoderArgs, StreamingDecoder, build_random_decoder, load_speech_decoder,
)
from ttscli.codecs.qwen3_12hz.streaming import stream_decode
from decoder_variants import input_only_reprime
from ttscli.codecs.qwen3_12hz.weights import checkpoint_shapes

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts" / "tokenizer"
TOL = 1e-4


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(FIXTURE / "golden.npz"))


@pytest.fixture(scope="module")
def dec():
    return load_speech_decoder(FIXTURE)


@pytest.fixture(scope="module")
def wav_b(dec, golden):
    return dec.decode(golden["codes_b"])


def maxerr(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.float64) - b).max())


def test_config_and_layout(dec):
    a = dec.args
    assert (a.num_quantizers, a.sliding_window, a.num_hidden_layers) == (16, 16, 3)
    assert dec.samples_per_frame == 1920 and dec.sample_rate == 24000
    # real file layout: both halves' codebooks, projections incl. the unused input_proj
    shapes = checkpoint_shapes(dec)
    assert shapes["decoder.quantizer.rvq_rest.vq.layers.14._codebook.embedding_sum"] == (32, 8)
    assert shapes["decoder.decoder.1.block.1.conv.weight"] == (32, 16, 16)      # ConvTranspose [in,out,2r]
    assert shapes["decoder.upsample.1.1.dwconv.conv.weight"] == (32, 1, 7)


def test_intermediates_match_upstream(dec, golden):
    codes = mx.array(golden["codes_a"].astype(np.int32))
    q = dec.quantizer(codes)
    assert maxerr(np.array(q), golden["quant_a"]) < TOL
    h = dec.pre_conv(q)
    assert maxerr(np.array(h), golden["pre_conv_a"]) < TOL
    t = dec.pre_transformer(h[None])[0]
    assert maxerr(np.array(t), golden["transformer_a"]) < TOL


def test_one_shot_matches_upstream(dec, golden):
    wav = dec.decode(golden["codes_a"])
    assert wav.dtype == np.float32 and wav.shape == golden["wav_a"].shape
    assert golden["wav_a"].std() > 0.1                      # non-trivial audio
    assert maxerr(wav, golden["wav_a"]) < TOL


def test_300_frames_match_upstream(wav_b, golden):
    # 300 frames >> the 16-frame window: exercises the sliding-window mask in every layer
    assert wav_b.shape == (300 * 1920,)
    assert maxerr(wav_b[::8], golden["wav_b_strided"]) < TOL


def test_padding_frames_are_trimmed_like_upstream(dec, golden):
    codes = golden["codes_c"]                               # last 3 frames are -1
    wav = dec.decode(codes)
    assert wav.shape == ((codes.shape[0] - 3) * 1920,)
    assert maxerr(wav[::4], golden["wav_c_strided"]) < TOL


def test_upstream_chunked_decode(dec, golden):
    wav = dec.chunked_decode(golden["codes_d"], chunk_size=50, left_context=10)
    assert maxerr(wav[::4], golden["wav_d_strided"]) < TOL
    # and it is NOT the unchunked function: 10 frames of context miss most of the receptive field
    assert maxerr(wav, dec.decode(golden["codes_d"])) > 1e-3


def test_decode_chunking_is_exact(dec, golden):
    codes = golden["codes_a"]
    assert maxerr(dec.decode(codes, chunk_frames=7), dec.decode(codes, chunk_frames=48)) < 5e-5


def test_streaming_equals_one_shot(dec, golden, wav_b):
    codes = golden["codes_b"]
    s = StreamingDecoder(dec, first_chunk_frames=3, chunk_frames=25)
    chunks = []
    for frame in codes[:290]:                               # one frame at a time, as the talker emits
        chunks += s.push(frame)
    chunks += s.push(codes[290:])
    tail = s.flush()
    chunks.append(tail)
    sizes = [c.shape[0] // 1920 for c in chunks]
    assert sizes == [3] + [25] * 11 + [22]
    assert s.frames == 300 and s.reprimes == 0
    # same sums, only BLAS blocking differs with the chunk length (measured 1.1e-5 with OpenBLAS)
    assert maxerr(np.concatenate(chunks), wav_b) < 5e-5
    assert maxerr(np.concatenate(chunks)[::8], golden["wav_b_strided"]) < TOL


def test_stream_decode_generator_odd_sizes(dec, golden):
    codes = golden["codes_a"]
    pieces = [codes[:5], codes[5:6], codes[6:40], codes[40:]]
    out = list(stream_decode(dec, pieces, first_chunk_frames=1, chunk_frames=7))
    assert out[0].shape == (1920,)
    assert maxerr(np.concatenate(out), golden["wav_a"]) < TOL


def test_reprime_300_frames_through_256_slots(dec, golden, wav_b):
    """Fixed 256-slot transformer cache, re-primed with the last 24 frames when full.

    Frame 256 finds the cache full: it is reset and every layer's keys/values are rebuilt from
    that layer's inputs of frames 232..255 (their outputs discarded), then decoding goes on.
    The tiny decoder attends to the last 15 frames per layer, so 24 frames of per-layer context
    hold everything later frames see: the audio equals upstream's one-shot decode throughout.
    """
    s = StreamingDecoder(dec, first_chunk_frames=3, chunk_frames=25, kv_capacity=256, reprime_frames=24)
    chunks = s.push(golden["codes_b"])
    tail = s.flush()
    wav = np.concatenate(chunks + ([tail] if tail is not None else []))
    assert s.reprimes == 1 and s.frames == 300
    assert s.cache.transformer.length == 24 + 300 - 256
    assert maxerr(wav[::8], golden["wav_b_strided"]) < TOL
    assert maxerr(wav, wav_b) < 5e-5


def test_reprime_frame_by_frame_default_context(dec, golden):
    # default context = window - 1 = 15 frames; the re-prime lands inside a 25-frame chunk
    s = StreamingDecoder(dec, first_chunk_frames=1, chunk_frames=25, kv_capacity=40)
    out = []
    for frame in golden["codes_b"][:120]:
        out += s.push(frame)
    out.append(s.flush())
    assert s.reprimes >= 4
    assert maxerr(np.concatenate(out)[::8], golden["wav_b_strided"][:120 * 240]) < TOL


def test_reprime_input_only_context_would_differ(dec, golden):
    """Why the per-layer context: re-running only the stack's input frames changes the audio.

    Emulates that variant with the same cache: after the reset every layer's keys are rebuilt
    from the re-run input frames' own (truncated) outputs instead of the remembered layer inputs.
    """
    tr = dec.pre_transformer
    s = StreamingDecoder(dec, kv_capacity=256, reprime_frames=24)
    cache = s.cache.transformer
    orig = tr._reprime

    tr._reprime = lambda c: input_only_reprime(tr, c)
    try:
        wav = np.concatenate(s.push(golden["codes_b"]) + [s.flush()])
    finally:
        tr._reprime = orig
    assert cache.reprimes == 1
    err = np.abs(wav[::8].astype(np.float64) - golden["wav_b_strided"]).reshape(300, 240).max(axis=1)
    assert err[:256].max() < TOL
    assert err[256:].max() > 1e-3


def test_reprime_context_shorter_than_window_is_refused(dec):
    with pytest.raises(ValueError, match="would change the audio"):
        StreamingDecoder(dec, kv_capacity=256, reprime_frames=10)
    with pytest.raises(ValueError, match="must exceed"):
        StreamingDecoder(dec, kv_capacity=20, reprime_frames=20)


def test_reprime_repeats_and_never_overflows(dec, golden):
    s = StreamingDecoder(dec, first_chunk_frames=1, chunk_frames=1, kv_capacity=30, reprime_frames=24)
    for frame in golden["codes_a"]:                         # 48 frames, one at a time
        s.push(frame)
        assert s.cache.transformer.length <= 30
    assert s.reprimes == 3                                  # full at frames 30, 36 and 42 (24 + 6 new each time)


def _copy_fixture(tmp_path, mutate):
    dst = tmp_path / "speech_tokenizer"
    dst.mkdir()
    shutil.copy(FIXTURE / "config.json", dst / "config.json")
    w = load_file(str(FIXTURE / "model.safetensors"))
    mutate(w)
    save_file(w, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return tmp_path


def test_encoder_keys_are_ignored_and_model_folder_accepted(tmp_path, golden):
    root = _copy_fixture(tmp_path, lambda w: [w.pop(k) for k in [k for k in w if k.startswith("encoder.")][:3]])
    d = load_speech_decoder(root)                           # model folder holding speech_tokenizer/
    assert maxerr(d.decode(golden["codes_a"][:6]), golden["wav_a"][:6 * 1920]) < TOL


@pytest.mark.parametrize("mutate, words", [
    (lambda w: w.pop("decoder.pre_transformer.layers.2.mlp_layer_scale.scale"), ["missing", "mlp_layer_scale"]),
    (lambda w: w.update({"decoder.pre_transformer.layers.3.mlp.gate_proj.weight": np.zeros((64, 32), np.float32)}),
     ["unexpected", "layers.3.mlp.gate_proj"]),
    (lambda w: w.update({"decoder.decoder.2.block.1.conv.weight": np.zeros((8, 8, 10), np.float32)}),
     ["mis-shaped", "decoder.decoder.2.block.1.conv.weight", "[8, 8, 10]", "[16, 8, 10]"]),
])
def test_strict_loading(tmp_path, mutate, words):
    root = _copy_fixture(tmp_path, mutate)
    with pytest.raises(CheckpointError) as e:
        load_speech_decoder(root / "speech_tokenizer")
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


def test_bad_codes_rejected(dec):
    with pytest.raises(ValueError):
        dec.decode(np.zeros((4, 15), np.int64))
    with pytest.raises(ValueError):
        dec.decode(np.full((4, 16), 32))
    with pytest.raises(ValueError):
        StreamingDecoder(dec).push(np.full((16,), -1))


def test_random_decoder_builds_at_given_dims():
    args = DecoderArgs(codebook_size=16, codebook_dim=8, latent_dim=16, hidden_size=8, intermediate_size=16,
                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=4,
                       decoder_dim=16, sliding_window=4)
    d = build_random_decoder("float32", args=args)
    wav = d.decode(np.random.default_rng(0).integers(0, 16, (5, 16)))
    assert wav.shape == (5 * 1920,) and np.isfinite(wav).all() and wav.std() > 1e-3
    assert DecoderArgs().samples_per_frame == 1920


def test_prime_with_reference_codes_equals_upstream_one_pass(dec, golden):
    # voice clone: upstream decodes cat(ref, generated) in one pass and cuts the reference audio
    codes = golden["codes_a"]
    ref, gen = codes[:30], codes[30:]
    assert dec.conv_history_frames == 10                   # ~18000 samples behind the transformer
    s = StreamingDecoder(dec, first_chunk_frames=3, chunk_frames=25)
    s.prime(ref)
    out = s.push(gen) + [s.flush()]
    wav = np.concatenate([c for c in out if c is not None])
    assert maxerr(wav, golden["wav_a"][30 * 1920:]) < TOL
    assert s.frames == 48


@pytest.mark.parametrize("dtype, rms_max", [("float16", 0.02), ("bfloat16", 0.1)])
def test_half_precision_runs_close(golden, dtype, rms_max):
    # measured rms error 0.003 (float16) and 0.024 (bfloat16) on a 0.38-rms signal
    d = load_speech_decoder(FIXTURE, dtype)
    wav = d.decode(golden["codes_a"][:20])
    ref = golden["wav_a"][:20 * 1920]
    assert wav.dtype == np.float32 and np.isfinite(wav).all()
    assert np.sqrt(np.mean((wav - ref) ** 2)) < rms_max
