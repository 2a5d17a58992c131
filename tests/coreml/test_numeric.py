"""The saved packages' MIL programs, run here with numpy (mil_interp.py) through the Core ML
code decoder, against goldens from the upstream PyTorch reference and against our MLX LM."""
import numpy as np
import pytest
from coreml_common import CAPACITY, CHECKPOINT
from mil_interp import InterpretedModel

from ttscli.backends.coreml.decoder import CoreMLCodeDecoder
from ttscli.errors import BackendUnavailableError, GenerationError


def cosine_rows(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def talker(pk, fp16=True):
    folder, manifest = pk
    return CoreMLCodeDecoder.open(folder, manifest=manifest,
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


def test_8bit_package_close_to_upstream(packages_8bit, goldens):
    logits, _, _ = run_talker(talker(packages_8bit), goldens["talker_embeds"])
    assert cosine_rows(logits, goldens["talker_logits"]).min() > 0.999
    np.testing.assert_array_equal(logits.argmax(-1), goldens["talker_logits"].argmax(-1))


def test_8bit_quantizes_only_weight_matrices(packages_8bit):
    """At this capacity the RoPE tables pass coremltools' size threshold; they must stay exact
    (position 0's sin row is all zeros, which a per-row int8 scale turns into NaN)."""
    from mil_interp import load_package_program

    folder, manifest = packages_8bit
    for op in load_package_program(folder / "talker.mlpackage").functions["main"].operations:
        if op.op_type.startswith("constexpr"):
            assert all(u.op_type == "linear" for u in op.outputs[0].child_ops), op.name
            assert op.scale.val.shape[:-1] == op.data.val.shape[:-1]      # one scale per output row
    assert manifest["components"]["code_decoder"]["cache_shape"][2] * 16 > 2048


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
    with pytest.raises(GenerationError, match=f"holds {CAPACITY} positions but the prompt need {CAPACITY + 1}"):
        t.prefill(e[None], cache)
    assert cache.offset == 0                    # refused before any work
    t.prefill(e[None, :CAPACITY - 1], cache)
    t.step(e[0][None, None], cache)
    assert cache.offset == CAPACITY
    with pytest.raises(GenerationError, match="--capacity"):
        t.step(e[0][None, None], cache)
    assert cache.offset == CAPACITY


def test_without_coreml_runtime_loading_is_a_clear_error(packages):
    from ttscli.backends.coreml import coreml_available
    from ttscli.backends.coreml.decoder import open_code_decoder

    ok, why = coreml_available()
    if ok:
        pytest.skip("Core ML runs here")
    assert "Core ML needs macOS 15+" in why
    folder, _ = packages
    with pytest.raises(BackendUnavailableError, match="Core ML needs macOS 15"):
        CoreMLCodeDecoder.open(folder)
    with pytest.raises(BackendUnavailableError, match="Core ML needs macOS 15"):
        open_code_decoder(CHECKPOINT)


def test_greedy_frames_equal_mlx(packages_fp32):
    """The hybrid split the pipeline runs: the Core ML talker (fp32 compute, run by numpy) with
    MLX's embeddings and code predictor, against the all-MLX loop; greedy, 4 frames."""
    mx = pytest.importorskip("mlx.core")
    from ttscli.models.qwen3_tts.load import load_model
    from ttscli.lm import SamplingParams

    model, _ = load_model(CHECKPOINT, "float32")
    tk = model.talker
    ct_talker = talker(packages_fp32, fp16=False)
    greedy = SamplingParams(do_sample=False)
    prompt = np.random.default_rng(0).standard_normal((1, 6, tk.args.hidden_size)).astype(np.float32)
    eos = tk.args.codec_eos_token_id

    def pick0(logits):
        lg = np.array(logits, np.float32).reshape(-1).copy()
        keep = lg[eos]
        lg[2048:] = -np.inf
        lg[eos] = keep
        return int(lg.argmax())

    def frames(prefill, step, n):
        logits, hidden = prefill(mx.array(prompt))
        out = []
        for _ in range(n):
            c0 = pick0(logits)
            rest, _ = tk.code_predictor.frame(hidden, tk.embed_codec(mx.array([c0])), greedy, None)
            codes = [c0] + np.array(rest).reshape(-1).tolist()
            out.append(codes)
            logits, hidden = step(tk.embed_frame(mx.array([codes]))[:, None, :])
        return out

    mcache, ccache = tk.new_cache(), ct_talker.new_cache()
    want = frames(lambda e: tk(e, mcache), lambda e: tk(e, mcache), 4)
    got = frames(lambda e: ct_talker.prefill(e, ccache), lambda e: ct_talker.step(e, ccache), 4)
    assert got == want


def test_package_built_from_the_mlx_model_matches_upstream(tmp_path, goldens):
    """The random-weights bench path: the talker package from an in-memory MLX model."""
    pytest.importorskip("mlx.core")
    from ttscli.models.qwen3_tts.coreml_export import build_from_model
    from ttscli.models.qwen3_tts.load import load_model

    model, _ = load_model(CHECKPOINT, "float32")
    folder = build_from_model(model, capacity=16, out_dir=tmp_path / "pk")
    assert build_from_model(model, capacity=16, out_dir=tmp_path / "pk") == folder     # cached
    t = CoreMLCodeDecoder.open(folder, model=InterpretedModel(folder / "talker.mlpackage", fp16=False))
    logits, _, _ = run_talker(t, goldens["talker_embeds"][:4])
    np.testing.assert_allclose(logits, goldens["talker_logits"][:4], atol=2e-3)
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "talker.mlpackage"]
