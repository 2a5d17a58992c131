"""The saved packages' MIL programs, run here with numpy (mil_interp.py) through the Core ML
runtime classes, against goldens from the upstream PyTorch reference."""
import numpy as np
import pytest
from coreml_common import CAPACITY, CHECKPOINT
from mil_interp import InterpretedModel

from ttscli.errors import BackendUnavailableError, GenerationError
from ttscli.models.qwen3_tts.coreml_runtime import (
    CoreMLCodePredictor, CoreMLSpeechDecoder, CoreMLTalker, windowed_decode)


def cosine_rows(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def talker(pk, fp16=True):
    folder, manifest = pk
    return CoreMLTalker(folder, manifest=manifest,
                        model=InterpretedModel(folder / "talker.mlpackage", fp16=fp16))


def run_talker(t, embeds):
    cache = t.new_cache()
    out = [t.step(e[None, None], cache) for e in embeds]
    return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out]), cache


def test_talker_fp32_compute_matches_upstream(packages_fp32, goldens):
    logits, hidden, cache = run_talker(talker(packages_fp32, fp16=False), goldens["talker_embeds"])
    assert cache.offset == len(goldens["talker_embeds"])
    np.testing.assert_allclose(logits, goldens["talker_logits"], atol=2e-4, rtol=0)
    np.testing.assert_allclose(hidden, goldens["talker_hidden"], atol=2e-4, rtol=0)


def test_talker_fp16_package_matches_upstream(packages, goldens):
    """fp16 weights and fp16 activations: close, same argmax at every position."""
    logits, hidden, _ = run_talker(talker(packages, fp16=True), goldens["talker_embeds"])
    assert cosine_rows(logits, goldens["talker_logits"]).min() > 0.9999
    assert np.abs(hidden - goldens["talker_hidden"]).max() < 0.02
    np.testing.assert_array_equal(logits.argmax(-1), goldens["talker_logits"].argmax(-1))


def test_talker_prefill_equals_stepping(packages_fp32, goldens):
    t = talker(packages_fp32, fp16=False)
    e = goldens["talker_embeds"]
    cache = t.new_cache()
    logits, hidden = t.prefill(e[None, :8], cache)
    assert cache.offset == 8
    np.testing.assert_allclose(logits[0], goldens["talker_logits"][7], atol=2e-4)
    logits, _ = t.step(e[8][None, None], cache)
    np.testing.assert_allclose(logits[0], goldens["talker_logits"][8], atol=2e-4)


def test_talker_capacity_is_an_error_not_a_clamp(packages, goldens):
    t = talker(packages)
    e = np.resize(goldens["talker_embeds"], (CAPACITY + 1, goldens["talker_embeds"].shape[1]))
    cache = t.new_cache()
    with pytest.raises(GenerationError, match=f"capacity is {CAPACITY} positions but the prompt need {CAPACITY + 1}"):
        t.prefill(e[None], cache)
    assert cache.offset == 0                    # refused before any work
    t.prefill(e[None, :CAPACITY - 1], cache)
    t.step(e[0][None, None], cache)
    assert cache.offset == CAPACITY
    with pytest.raises(GenerationError, match="--capacity"):
        t.step(e[0][None, None], cache)
    with pytest.raises(GenerationError, match="capacity"):
        t.ensure_fits(t.new_cache(), CAPACITY + 1)


@pytest.mark.parametrize("pk, fp16, tol", [("packages_fp32", False, 5e-4), ("packages", True, 0.02)])
def test_code_predictor_matches_upstream(request, goldens, pk, fp16, tol):
    folder, manifest = request.getfixturevalue(pk)
    cp = CoreMLCodePredictor(folder, manifest=manifest,
                             model=InterpretedModel(folder / "code_predictor.mlpackage", fp16=fp16))
    x = goldens["cp_inputs"]
    cache = cp.new_cache()
    cp.logits(x[0], 0, 0, cache)
    got = np.stack([cp.logits(x[j + 1], j + 1, j, cache) for j in range(15)])
    assert np.abs(got - goldens["cp_logits"]).max() < tol
    # A second frame reuses the state: stale slots past the position must not leak in.
    cp.logits(x[0] * 0.5, 0, 0, cache)
    again = cp.logits(x[1], 1, 0, cache)
    first = cp.new_cache()
    cp.logits(x[0] * 0.5, 0, 0, first)
    np.testing.assert_allclose(again, cp.logits(x[1], 1, 0, first), atol=1e-6)


def test_code_predictor_frame_feeds_positions_heads_and_embeddings_in_order(packages_fp32, goldens):
    folder, manifest = packages_fp32
    cp = CoreMLCodePredictor(folder, manifest=manifest,
                             model=InterpretedModel(folder / "code_predictor.mlpackage", fp16=False))
    x = goldens["cp_inputs"]
    seen = []

    def embed_code(j, code):          # stand-in table: row j+2 of the golden inputs
        seen.append((j, code))
        return x[j + 2]

    drawn = []

    def sample(logits):
        drawn.append(logits)
        return len(drawn) * 7

    codes = cp.frame(x[0], x[1], embed_code, sample, cp.new_cache())
    assert codes == [7 * (i + 1) for i in range(15)]
    assert seen == [(j, 7 * (j + 1)) for j in range(14)]
    np.testing.assert_allclose(np.stack(drawn), goldens["cp_logits"], atol=5e-4)


def decoder(pk, fp16, left_context):
    folder, manifest = pk
    return CoreMLSpeechDecoder(folder, manifest=manifest, left_context=left_context,
                               model=InterpretedModel(folder / "speech_decoder.mlpackage", fp16=fp16))


def test_speech_decoder_fp32_matches_upstream_one_shot(packages_fp32, goldens):
    d = decoder(packages_fp32, False, 0)
    wav = d.decode(goldens["decoder_codes"].T)
    assert wav.shape == goldens["decoder_wav"].shape
    np.testing.assert_allclose(wav, goldens["decoder_wav"], atol=1e-4)


def test_speech_decoder_windows_match_upstream_chunked_decode(packages_fp32, goldens):
    """Window 9 with 3 frames of context = upstream chunked_decode(chunk 6, context 3); the last
    window is mostly right padding, which causality makes invisible."""
    d = decoder(packages_fp32, False, 3)
    wav = d.decode(goldens["decoder_long_codes"].T)
    np.testing.assert_allclose(wav, goldens["decoder_chunked_wav"], atol=1e-4)


def test_speech_decoder_fp16_package_close_to_upstream(packages, goldens):
    wav = decoder(packages, True, 0).decode(goldens["decoder_codes"].T)
    ref = goldens["decoder_wav"]
    snr = 10 * np.log10((ref ** 2).sum() / ((wav - ref) ** 2).sum())
    assert snr > 25, snr


def test_windowed_decode_bookkeeping():
    calls = []

    def fake(codes):                      # frame t -> 2 samples equal to its first code
        calls.append(codes[0, 0].copy())
        return np.repeat(codes[0, 0].astype(np.float32), 2)

    codes = np.arange(11)[:, None].repeat(3, axis=1)
    out = windowed_decode(codes, window=5, left_context=2, decode_window=fake, samples_per_frame=2)
    np.testing.assert_array_equal(out, np.repeat(np.arange(11), 2).astype(np.float32))
    assert [c.tolist() for c in calls] == [[0, 1, 2, 0, 0], [1, 2, 3, 4, 5], [4, 5, 6, 7, 8], [7, 8, 9, 10, 0]]


def test_without_coreml_runtime_loading_is_a_clear_error(packages):
    from ttscli.backends.coreml import coreml_available

    ok, why = coreml_available()
    if ok:
        pytest.skip("Core ML runs here")
    assert "Core ML needs macOS 15+" in why
    folder, _ = packages
    with pytest.raises(BackendUnavailableError, match="Core ML needs macOS 15"):
        CoreMLTalker(folder)
    from ttscli.models.base import LoadOptions
    from ttscli.models.qwen3_tts.coreml_runtime import CoreMLCodeDecoder

    with pytest.raises(BackendUnavailableError, match="Core ML needs macOS 15"):
        CoreMLCodeDecoder.load(None, CHECKPOINT, LoadOptions(extra={"coreml_dir": folder}))


def test_greedy_frames_equal_mlx(packages_fp32):
    """Talker + code predictor packages (fp32 compute, run by numpy) vs the MLX implementation,
    greedy, with MLX's embeddings feeding both (the hybrid pipeline's split)."""
    mx = pytest.importorskip("mlx.core")
    from ttscli.models.qwen3_tts.loader import load_model
    from ttscli.sample import SamplingParams

    model, _ = load_model(CHECKPOINT, "float32")
    tk = model.talker
    folder, manifest = packages_fp32
    ct_talker = talker(packages_fp32, fp16=False)
    ct_cp = CoreMLCodePredictor(folder, manifest=manifest,
                                model=InterpretedModel(folder / "code_predictor.mlpackage", fp16=False))
    greedy = SamplingParams(do_sample=False)
    rng = np.random.default_rng(0)
    prompt = rng.standard_normal((1, 6, tk.args.hidden_size)).astype(np.float32)
    eos = tk.args.codec_eos_token_id

    def pick0(logits):
        lg = np.array(logits, np.float32).reshape(-1).copy()
        lg[2048:] = -np.inf
        lg[eos] = np.array(logits).reshape(-1)[eos]
        return int(lg.argmax())

    def frames_mlx(n):
        cache = tk.new_cache()
        logits, hidden = tk(mx.array(prompt), cache)
        out = []
        for _ in range(n):
            c0 = pick0(logits)
            e0 = tk.embed_codec(mx.array([c0]))
            rest, _ = tk.code_predictor.frame(hidden, e0, greedy, None)
            codes = [c0] + np.array(rest).reshape(-1).tolist()
            out.append(codes)
            logits, hidden = tk(tk.embed_frame(mx.array([codes]))[:, None, :], cache)
        return out

    def frames_coreml(n):
        cache = ct_talker.new_cache()
        cp_cache = ct_cp.new_cache()
        logits, hidden = ct_talker.prefill(prompt, cache)
        tables = [np.array(e.weight) for e in tk.code_predictor.model.codec_embedding]
        out = []
        for _ in range(n):
            c0 = pick0(logits)
            e0 = np.array(tk.embed_codec(mx.array([c0])))
            rest = ct_cp.frame(hidden, e0, lambda j, c: tables[j][c], lambda lg: int(np.argmax(lg)), cp_cache)
            codes = [c0] + rest
            out.append(codes)
            logits, hidden = ct_talker.step(np.array(tk.embed_frame(mx.array([codes]))), cache)
        return out

    assert frames_coreml(4) == frames_mlx(4)


def test_speech_decoder_matches_mlx_decoder(packages_fp32, goldens):
    pytest.importorskip("mlx.core")
    from ttscli.models.qwen3_tts.speech_tokenizer.weights import load_speech_decoder

    codes = goldens["decoder_codes"].T
    want = load_speech_decoder(CHECKPOINT / "speech_tokenizer").decode(codes)
    np.testing.assert_allclose(decoder(packages_fp32, False, 0).decode(codes), want, atol=1e-4)


def test_8bit_packages_close_to_upstream(packages_8bit, goldens):
    folder, manifest = packages_8bit
    t = CoreMLTalker(folder, manifest=manifest, model=InterpretedModel(folder / "talker.mlpackage"))
    logits, _, _ = run_talker(t, goldens["talker_embeds"])
    assert cosine_rows(logits, goldens["talker_logits"]).min() > 0.999
    np.testing.assert_array_equal(logits.argmax(-1), goldens["talker_logits"].argmax(-1))
    cp = CoreMLCodePredictor(folder, manifest=manifest, model=InterpretedModel(folder / "code_predictor.mlpackage"))
    x, cache = goldens["cp_inputs"], cp.new_cache()
    cp.logits(x[0], 0, 0, cache)
    got = np.stack([cp.logits(x[j + 1], j + 1, j, cache) for j in range(15)])
    assert cosine_rows(got, goldens["cp_logits"]).min() > 0.999


def test_8bit_quantizes_only_weight_matrices(packages_8bit, goldens):
    """At this capacity the RoPE tables pass coremltools' size threshold; they must stay exact
    (position 0's sin row is all zeros, which a per-row int8 scale turns into NaN)."""
    from mil_interp import load_package_program

    folder, manifest = packages_8bit
    for name in ("talker", "code_predictor"):
        fn = load_package_program(folder / f"{name}.mlpackage").functions["main"]
        for op in fn.operations:
            if op.op_type.startswith("constexpr"):
                users = op.outputs[0].child_ops
                assert all(u.op_type == "linear" or u.name.startswith("cp_heads") for u in users), op.name
                assert op.scale.val.shape[:-1] == op.data.val.shape[:-1]      # one scale per output row
    assert manifest["packages"]["talker"]["cache_shape"][2] * 16 > 2048


def stream_decoder(pk, fp16):
    from ttscli.models.qwen3_tts.coreml_runtime import CoreMLStreamDecoder

    folder, manifest = pk
    return CoreMLStreamDecoder(folder, manifest=manifest,
                               model=InterpretedModel(folder / "speech_decoder_stream.mlpackage", fp16=fp16))


def test_stream_decoder_equals_one_shot_upstream(packages_fp32, goldens):
    """9 frames through a 4-frame attention window, 3 frames per call, pushed unevenly."""
    d = stream_decoder(packages_fp32, False)
    codes, ref = goldens["decoder_codes"].T, goldens["decoder_wav"]
    s = d.new_stream()
    parts = [d.push(codes[:1], s), d.push(codes[1:5], s), d.push(codes[5:7], s), d.flush(s)]
    assert [len(p) // 1920 for p in parts] == [0, 3, 3, 1]
    np.testing.assert_allclose(np.concatenate(parts), ref[:7 * 1920], atol=1e-4)
    np.testing.assert_allclose(d.decode(codes), ref, atol=1e-4)


def test_stream_decoder_prime_drops_context_audio(packages_fp32, goldens):
    d = stream_decoder(packages_fp32, False)
    codes, ref = goldens["decoder_codes"].T, goldens["decoder_wav"]
    s = d.new_stream()
    d.prime(codes[:4], s)
    wav = np.concatenate([d.push(codes[4:], s), d.flush(s)])
    np.testing.assert_allclose(wav, ref[4 * 1920:], atol=1e-4)


def test_stream_decoder_fp16_close_to_upstream(packages, goldens):
    wav = stream_decoder(packages, True).decode(goldens["decoder_codes"].T)
    ref = goldens["decoder_wav"]
    assert 10 * np.log10((ref ** 2).sum() / ((wav - ref) ** 2).sum()) > 25


def test_packages_built_from_the_mlx_model_match_upstream(tmp_path, goldens):
    """The random-weights bench path: packages from an in-memory MLX model (same names/layout)."""
    pytest.importorskip("mlx.core")
    from ttscli.models.qwen3_tts.coreml_runtime import build_from_model
    from ttscli.models.qwen3_tts.loader import load_model

    model, _ = load_model(CHECKPOINT, "float32")
    folder = build_from_model(model, capacity=16, out_dir=tmp_path / "pk")
    assert build_from_model(model, capacity=16, out_dir=tmp_path / "pk") == folder     # cached
    t = CoreMLTalker(folder, model=InterpretedModel(folder / "talker.mlpackage", fp16=False))
    logits, _, _ = run_talker(t, goldens["talker_embeds"][:4])
    np.testing.assert_allclose(logits, goldens["talker_logits"][:4], atol=2e-3)
    assert sorted(p.name for p in folder.iterdir()) == ["code_predictor.mlpackage", "manifest.json", "talker.mlpackage"]
