"""Core ML runtime vs MLX and vs the upstream goldens, with the real Core ML runtime.

Run on macOS 15+ (Apple Silicon): ``pytest -m macos tests/coreml``. Skipped elsewhere.
"""
import numpy as np
import pytest
from coreml_common import CAPACITY, CHECKPOINT

from ttscli.backends.coreml import coreml_available
from ttscli.errors import GenerationError

_ok, _why = coreml_available()
pytestmark = [pytest.mark.macos, pytest.mark.skipif(not _ok, reason=_why or "Core ML unavailable")]


def cosine_rows(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def mlx_model():
    from ttscli.models.qwen3_tts.loader import load_model

    model, _ = load_model(CHECKPOINT, "float32")
    return model


def _runtime(pk, compute_units="cpu_and_gpu"):
    from ttscli.models.qwen3_tts.coreml_runtime import CoreMLCodePredictor, CoreMLSpeechDecoder, CoreMLTalker

    folder, manifest = pk
    return (CoreMLTalker(folder, compute_units, manifest), CoreMLCodePredictor(folder, compute_units, manifest),
            lambda left: CoreMLSpeechDecoder(folder, compute_units, manifest, left_context=left))


@pytest.mark.parametrize("units", ["cpu_and_gpu", "all"])
def test_talker_logits_cosine_vs_mlx(packages, mlx_model, goldens, units):
    import mlx.core as mx

    talker, _, _ = _runtime(packages, units)
    e = goldens["talker_embeds"]
    cache = talker.new_cache()
    got = np.concatenate([talker.step(row[None, None], cache)[0] for row in e])
    tk = mlx_model.talker
    mcache = tk.new_cache()
    want = np.concatenate([np.array(tk(mx.array(row[None, None]), mcache)[0]) for row in e])
    assert cosine_rows(got, want).min() > 0.999
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    assert cosine_rows(got, goldens["talker_logits"]).min() > 0.999


def test_talker_fp32_package_matches_upstream(packages_fp32, goldens):
    talker, _, _ = _runtime(packages_fp32, "cpu_only")
    cache = talker.new_cache()
    logits, hidden = talker.prefill(goldens["talker_embeds"][None], cache)
    np.testing.assert_allclose(logits[0], goldens["talker_logits"][-1], atol=1e-3)
    np.testing.assert_allclose(hidden[0], goldens["talker_hidden"][-1], atol=1e-3)


def test_greedy_frames_equal_mlx(packages_fp32, mlx_model):
    import mlx.core as mx

    from ttscli.sample import SamplingParams

    talker, cp, _ = _runtime(packages_fp32, "cpu_only")
    tk = mlx_model.talker
    greedy = SamplingParams(do_sample=False)
    prompt = np.random.default_rng(0).standard_normal((1, 6, tk.args.hidden_size)).astype(np.float32)
    tables = [np.array(e.weight) for e in tk.code_predictor.model.codec_embedding]

    def pick0(logits):
        lg = np.array(logits, np.float32).reshape(-1).copy()
        eos = lg[tk.args.codec_eos_token_id]
        lg[2048:] = -np.inf
        lg[tk.args.codec_eos_token_id] = eos
        return int(lg.argmax())

    mcache, cache, cp_cache = tk.new_cache(), talker.new_cache(), cp.new_cache()
    ml, mh = tk(mx.array(prompt), mcache)
    cl, ch = talker.prefill(prompt, cache)
    for _ in range(6):
        c0m, c0c = pick0(ml), pick0(cl)
        assert c0m == c0c
        e0 = tk.embed_codec(mx.array([c0m]))
        rest_m = np.array(tk.code_predictor.frame(mh, e0, greedy, None)[0]).reshape(-1).tolist()
        rest_c = cp.frame(ch, np.array(e0), lambda j, c: tables[j][c], lambda lg: int(np.argmax(lg)), cp_cache)
        assert rest_c == rest_m
        nxt = tk.embed_frame(mx.array([[c0m] + rest_m]))[:, None, :]
        ml, mh = tk(nxt, mcache)
        cl, ch = talker.step(np.array(nxt), cache)


def test_capacity_error_on_device(packages, goldens):
    talker, _, _ = _runtime(packages)
    cache = talker.new_cache()
    e = np.resize(goldens["talker_embeds"], (CAPACITY, goldens["talker_embeds"].shape[1]))
    talker.prefill(e[None], cache)
    with pytest.raises(GenerationError, match=f"capacity is {CAPACITY}"):
        talker.step(e[0][None, None], cache)


def test_speech_decoder_waveform_vs_upstream_and_mlx(packages, packages_fp32, goldens):
    from ttscli.models.qwen3_tts.speech_tokenizer.weights import load_speech_decoder

    codes = goldens["decoder_codes"].T
    ref = goldens["decoder_wav"]
    _, _, dec32 = _runtime(packages_fp32, "cpu_only")
    np.testing.assert_allclose(dec32(0).decode(codes), ref, atol=5e-4)
    np.testing.assert_allclose(dec32(3).decode(goldens["decoder_long_codes"].T), goldens["decoder_chunked_wav"],
                               atol=5e-4)
    _, _, dec16 = _runtime(packages)
    wav = dec16(0).decode(codes)
    mlx_wav = load_speech_decoder(CHECKPOINT / "speech_tokenizer").decode(codes)
    for other in (ref, mlx_wav):
        snr = 10 * np.log10((other ** 2).sum() / ((wav - other) ** 2).sum())
        assert snr > 25, snr


def test_stream_decoder_on_device_equals_one_shot(packages, packages_fp32, goldens):
    from ttscli.models.qwen3_tts.coreml_runtime import CoreMLStreamDecoder

    codes, ref = goldens["decoder_codes"].T, goldens["decoder_wav"]
    folder, manifest = packages_fp32
    d = CoreMLStreamDecoder(folder, "cpu_only", manifest)
    s = d.new_stream()
    wav = np.concatenate([d.push(codes[:2], s), d.push(codes[2:8], s), d.flush(s)])
    # fp16 state carries conv tails between calls, so a little looser than the one-shot package.
    np.testing.assert_allclose(wav, ref[:8 * 1920], atol=3e-3)
    folder, manifest = packages
    wav16 = CoreMLStreamDecoder(folder, "cpu_and_gpu", manifest).decode(codes)
    assert 10 * np.log10((ref ** 2).sum() / ((wav16 - ref) ** 2).sum()) > 25


def test_code_decoder_load_checks_the_source_checkpoint(packages, tmp_path):
    import shutil

    from ttscli.models.base import LoadOptions
    from ttscli.models.qwen3_tts.coreml_runtime import CoreMLCodeDecoder
    from ttscli.errors import CheckpointError

    folder, _ = packages
    dec = CoreMLCodeDecoder.load(None, CHECKPOINT, LoadOptions(extra={"coreml_dir": folder}))
    cache = dec.new_cache()
    logits, hidden = dec.prefill(np.zeros((1, 2, dec.hidden_size), np.float32), cache)
    assert logits.shape == (1, dec.vocab_size) and cache.offset == 2
    other = tmp_path / "other"
    shutil.copytree(CHECKPOINT, other)
    with open(other / "model.safetensors", "ab") as f:
        f.write(b"\0")
    with pytest.raises(CheckpointError, match="another checkpoint"):
        CoreMLCodeDecoder.load(None, other, LoadOptions(extra={"coreml_dir": folder}))
