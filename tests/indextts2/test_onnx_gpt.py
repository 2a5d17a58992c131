"""IndexTTS2's semantic GPT on onnxruntime (onnx_gpt.py) against the same upstream goldens as the
MLX GPT (scripts/goldens/indextts2_upstream.py for goldens.npz, scripts/goldens/indextts2_beams.py
for beams.npz), on the tiny gpt.pth."""

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
yaml = pytest.importorskip("yaml")
pytest.importorskip("onnxruntime")

from gptcheck import FIX, STOP, B, G, cosine, prompt, run, tiny_gpt

from ttscli.errors import UsageError
from ttscli.lm.sample import SamplingParams
from ttscli.models.indextts2 import onnx_gpt


def load(backend: str | None):
    gpt = tiny_gpt()
    if backend is not None:
        assert onnx_gpt.attach(gpt, backend, FIX / "tiny") == {"onnx-f32": "onnx-float32",
                                                               "onnx-int8": "onnx-int8"}[backend]
    return gpt


@pytest.fixture(scope="module")
def gpt():
    return load("onnx-f32")


@pytest.fixture(scope="module")
def embeds(gpt):
    return prompt(gpt)


def test_graph_replaces_the_mlx_forward(gpt):
    assert isinstance(gpt.decoder, onnx_gpt.OnnxGPT)
    assert type(gpt.make_cache()).__name__ == "LMCache"


def test_prefill(gpt, embeds):
    logits, hidden = gpt.prefill(embeds, gpt.make_cache(), return_hidden=True)
    assert logits.shape == (1, 66) and hidden.shape == (1, 32)
    h, lg = np.array(hidden[0]), np.array(logits[0])
    assert cosine(h, G["prefill_hidden"]) >= 0.99999
    assert cosine(lg, G["prefill_logits"]) >= 0.99999
    assert np.abs(h - G["prefill_hidden"]).max() <= 1e-5 * np.abs(G["prefill_hidden"]).max()
    assert np.abs(lg - G["prefill_logits"]).max() <= 1e-5 * np.abs(G["prefill_logits"]).max()


def test_steps_match_mlx(gpt, embeds):
    mlx_gpt = load(None)
    a, b = gpt.make_cache(), mlx_gpt.make_cache()
    la, lb = gpt.prefill(embeds, a), mlx_gpt.prefill(embeds, b)
    for i, code in enumerate(G["greedy"][:6].tolist()):
        assert np.abs(np.array(la) - np.array(lb)).max() <= 1e-5 * np.abs(np.array(lb)).max()
        la = gpt.step(mx.array([code]), i, a)
        lb = mlx_gpt.step(mx.array([code]), i, b)


@pytest.mark.parametrize("name,penalty", [("greedy", 1.0), ("greedy_rep", 10.0)])
def test_greedy_codes(gpt, embeds, name, penalty):
    p = SamplingParams(do_sample=False, repetition_penalty=penalty)
    assert run(gpt, embeds, p, max_tokens=20, min_tokens=20) == (G[name].tolist(), False)


@pytest.mark.parametrize("name", ["beam_free", "beam_forced", "beam_norep", "beam_lp2", "beam_short"])
def test_upstream_beam_search(gpt, embeds, name):
    """Beam rows reordered in the onnxruntime cache give upstream's codes."""
    ref = B[name].tolist()
    lo, hi = int(B[name + "_min"]), int(B[name + "_max"])
    p = SamplingParams(do_sample=False, repetition_penalty=1.0 if name == "beam_norep" else 10.0)
    codes, limit = run(gpt, embeds, p, max_tokens=hi, min_tokens=lo, num_beams=3,
                       length_penalty=2.0 if name == "beam_lp2" else 0.0)
    stopped = ref[-1] == STOP
    assert codes == (ref[:-1] if stopped else ref)
    assert limit == (not stopped and lo < hi)


def test_upstream_beam_sampling_replayed(gpt, embeds, monkeypatch):
    import ttscli.models.indextts2.gpt as module

    noise = iter(B["sample_beam_noise"])
    monkeypatch.setattr(module, "gumbel", lambda shape, key: mx.array(next(noise)).reshape(shape))
    p = SamplingParams(temperature=0.8, top_k=30, top_p=0.8, repetition_penalty=10.0, do_sample=True)
    codes, _ = run(gpt, embeds, p, max_tokens=30, num_beams=3)
    ref = B["sample_beam"].tolist()
    assert codes == (ref[:-1] if ref[-1] == STOP else ref)


def test_cache_rows_reordered_in_place():
    from ttscli.backends.onnx.runtime import LMCache

    keys = [np.arange(3 * 2 * 4 * 2, dtype=np.float32).reshape(3, 2, 4, 2)]
    cache = LMCache(keys, [k.copy() for k in keys], offset=3)
    buf = cache.keys[0]
    before = buf.copy()
    cache.select_rows([2, 0, 0])
    assert cache.keys[0] is buf                     # the bound buffer stays
    assert np.array_equal(buf[:, :, :3], before[[2, 0, 0], :, :3])
    assert np.array_equal(buf[:, :, 3:], before[:, :, 3:])   # stale positions are not copied
    cache.select_rows([1])                          # another row count: new buffers
    assert cache.keys[0].shape[0] == 1 and np.array_equal(cache.keys[0][0, :, :3], before[0, :, :3])


def test_int8_graph_runs_close(embeds):
    on8 = load("onnx-int8")
    ref = G["prefill_logits"]
    lg = np.array(on8.prefill(embeds, on8.make_cache())[0])
    # block-quantized weights: close to the float32 numbers, not equal to them
    assert cosine(lg, ref) >= 0.99
    assert np.abs(lg - ref).max() > 0


def test_float32_only():
    class Options:
        dtype = "bfloat16"

    with pytest.raises(UsageError, match="computes in float32"):
        onnx_gpt.check_options(Options())


def test_convert_to_onnx(tmp_path):
    """``ttscli convert indextts2 --to onnx [-q --q-bits 8]``: the GPT's graph and its manifest."""
    import json

    from ttscli.registry import load_registry

    spec = load_registry().resolve("indextts2")
    for quantize, precision in ((False, "float32"), (True, "int8")):
        out = tmp_path / precision
        onnx_gpt.convert_onnx(spec, FIX / "tiny", out, quantize=quantize, q_bits=8)
        entry = json.loads((out / "manifest.json").read_text())["components"]["code_decoder"]
        assert entry["precision"] == precision and entry["heads"] == ["logits"] and entry["layers"] == 2
        assert (out / "gpt.onnx").is_file() and (out / "gpt.onnx.data").is_file()
    with pytest.raises(UsageError, match="float32"):
        onnx_gpt.convert_onnx(spec, FIX / "tiny", tmp_path / "bf16", dtype="bfloat16")
