"""Chatterbox's T3 on onnxruntime (``--code-decoder-backend onnx*``) on the tiny checkpoint in the
published layout: the float32 graph against the upstream goldens (chatterbox-tts 0.1.7,
scripts/goldens/chatterbox_t3.py) and against MLX T3, CFG's two rows as one batch;
int8 against float32; `convert --to onnx`, its cache and rebuild on a changed checkpoint; the
random-weights build; what the backend cannot honour, as one line from the installed `ttscli`."""
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from clitools import by_name, no_files, only_line

import ttscli  # noqa: F401  (BLAS preload before mlx)

pytest.importorskip("onnxruntime")
mx = pytest.importorskip("mlx.core")

from ttscli.backends.onnx.graph import Quant
from ttscli.models.chatterbox.load import load_conds, load_t3, load_tokenizer
from ttscli.models.chatterbox.onnx_decoder import open_decoder
from ttscli.models.chatterbox.onnx_export import find_or_build
from ttscli.models.chatterbox.t3 import T3Sampling
from ttscli.models.chatterbox.tokenizer import punc_norm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"
TINY = FIX / "tiny"
G = np.load(FIX / "t3_goldens.npz")
META = json.loads((FIX / "t3_goldens.json").read_text())


def cosines(got, ref) -> np.ndarray:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    import os

    old = os.environ.get("TTSCLI_CACHE")
    os.environ["TTSCLI_CACHE"] = str(tmp_path_factory.mktemp("onnx-cache"))
    yield
    if old is None:
        os.environ.pop("TTSCLI_CACHE")
    else:
        os.environ["TTSCLI_CACHE"] = old


@pytest.fixture(scope="module")
def t3():
    return load_t3(TINY)


@pytest.fixture(scope="module")
def conds():
    return load_conds(TINY)


@pytest.fixture(scope="module")
def ids():
    return load_tokenizer(TINY).encode(punc_norm(META["text"]))


@pytest.fixture(scope="module")
def f32(cache):
    return open_decoder(find_or_build(TINY, Quant("float32")))


@pytest.mark.parametrize("exag", [5, 7])
def test_float32_prefill_matches_upstream(t3, conds, ids, f32, exag):
    embeds = t3.prefill_embeds(conds.t3_cond(exag / 10), ids, cfg=True)
    logits, hidden = f32.prefill(embeds, f32.new_cache())
    assert logits.shape == (2, t3.args.speech_vocab) and hidden.shape == (2, t3.args.hidden_size)
    assert cosines(logits, G[f"prefill_logits_exag{exag}"]).min() >= 0.99999
    ref, ref_h = t3(embeds, t3.new_cache())
    assert cosines(logits, ref).min() >= 0.99999
    np.testing.assert_allclose(np.array(hidden), np.array(ref_h), atol=1e-4)


@pytest.mark.parametrize("rp", [10, 12])
def test_float32_greedy_tokens_match_upstream(t3, conds, ids, f32, rp):
    s = T3Sampling(temperature=0.0, min_p=META["min_p"], top_p=META["top_p"], repetition_penalty=rp / 10,
                   cfg_weight=META["cfg_weight"], max_new_tokens=21)
    got = list(itertools.islice(t3.generate(conds.t3_cond(0.5), ids, s, decoder=f32), 20))
    assert got == G[f"greedy_rp{rp}"][:20].tolist()


def test_float32_draws_what_mlx_draws(t3, conds, ids, f32):
    """Sampled (temperature 0.8, min-p, penalty, seeded keys) and without CFG (one row): the
    same tokens as MLX T3; CFG's rows run as one batch of two."""
    from ttscli.lm.sample import KeyStream

    for cfg in (0.5, 0.0):
        s = T3Sampling(cfg_weight=cfg, max_new_tokens=21)
        want = list(itertools.islice(t3.generate(conds.t3_cond(0.5), ids, s, keys=KeyStream(3), ignore_eos=True), 20))
        got = list(itertools.islice(t3.generate(conds.t3_cond(0.5), ids, s, decoder=f32, keys=KeyStream(3),
                                                ignore_eos=True), 20))
        assert got == want, cfg
    c = f32.new_cache()
    f32.prefill(t3.prefill_embeds(conds.t3_cond(0.5), ids, cfg=True), c)
    assert c.keys[0].shape[0] == 2 and c.offset == 34 + len(ids) + 4      # CFG: one batch of two rows


def test_batch_of_two_rows_equals_each_row_alone(t3, conds, ids, f32):
    """CFG runs its rows as one batch: each row's logits after prefill and steps are those of the
    row run alone with its own cache (no row reads the other's keys)."""
    embeds = np.array(t3.prefill_embeds(conds.t3_cond(0.5), ids, cfg=True))
    steps = np.random.default_rng(0).standard_normal((4, 2, 1, embeds.shape[-1])).astype(np.float32)
    both = f32.new_cache()
    got = [f32.prefill(embeds, both)[0]] + [f32.step(e, both)[0] for e in steps]
    for r in range(2):
        alone = f32.new_cache()
        want = [f32.prefill(embeds[r:r + 1], alone)[0]] + [f32.step(e[r:r + 1], alone)[0] for e in steps]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g[r:r + 1], w, atol=1e-4)


def test_int8_logits_against_float32(t3, conds, ids, f32):
    i8 = open_decoder(find_or_build(TINY, Quant("int8")))
    assert i8.precision == "int8"
    embeds = t3.prefill_embeds(conds.t3_cond(0.5), ids, cfg=True)
    a, _ = f32.prefill(embeds, f32.new_cache())
    b, _ = i8.prefill(embeds, i8.new_cache())
    cos = cosines(b, a)
    assert 0.999 <= cos.min() < 1 - 1e-9     # quantized: close, not equal


def test_convert_cache_and_rebuild(tmp_path, monkeypatch):
    """`convert --to onnx -q --q-bits 8` records t3_cfg.safetensors' hash; the pipeline finds the
    conversion by it, and a changed checkpoint is rebuilt rather than served stale."""
    from ttscli.backends.onnx.manifest import read_manifest
    from ttscli.convert import ConvertRequest, convert
    from ttscli.registry import load_registry

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    ck = tmp_path / "ck"
    shutil.copytree(TINY, ck)
    out = convert(ConvertRequest("chatterbox", "onnx", quantize=True, q_bits=8, model_dir=ck), load_registry(),
                  note=lambda s: None)
    assert out.name == "onnx-int8" and out.parent.name == "chatterbox"
    m = read_manifest(out)
    assert m["family"] == "chatterbox" and m["precision"] == "int8" and list(m["components"]) == ["code_decoder"]
    assert set(m["source"]["files"]) == {"t3_cfg.safetensors"}
    assert find_or_build(ck, Quant("int8"), "chatterbox") == out
    stamp = (out / "manifest.json").stat().st_mtime_ns
    assert find_or_build(ck, Quant("int8"), "chatterbox") == out
    assert (out / "manifest.json").stat().st_mtime_ns == stamp           # found, not rebuilt
    w = mx.load(str(ck / "t3_cfg.safetensors"))
    w["speech_head.weight"] = w["speech_head.weight"] * 2.0
    mx.save_safetensors(str(ck / "t3_cfg.safetensors"), w, metadata={"format": "pt"})
    assert find_or_build(ck, Quant("int8"), "chatterbox") == out
    assert read_manifest(out)["source"]["files"] != m["source"]["files"]     # rebuilt from the new file


def test_random_weights_build_is_cached(t3, cache):
    from ttscli.models.chatterbox.onnx_export import build_from_model

    a = build_from_model(t3, Quant("float32"))
    stamp = (a / "manifest.json").stat().st_mtime_ns
    assert build_from_model(t3, Quant("float32")) == a and (a / "manifest.json").stat().st_mtime_ns == stamp
    assert build_from_model(t3, Quant("int8")) != a
    dec = open_decoder(a)
    e = mx.random.normal((1, 5, t3.args.hidden_size), key=mx.random.key(0))
    got, _ = dec.prefill(e, dec.new_cache())
    want, _ = t3(e, t3.new_cache())
    assert cosines(got, want).min() >= 0.99999


def test_pipeline_names_the_backend_and_refuses_what_it_cannot_honour(cache):
    from ttscli.errors import UsageError
    from ttscli.models.base import LoadOptions
    from ttscli.models.chatterbox.load import load_pipeline

    pipe = load_pipeline(None, TINY, LoadOptions(backends={"code_decoder": "onnx"}))
    assert pipe.backends["code_decoder"] == "onnx-int8"
    with pytest.raises(UsageError, match="float32"):
        load_pipeline(None, TINY, LoadOptions(dtype="bfloat16", backends={"code_decoder": "onnx-f32"}))
    with pytest.raises(UsageError, match="prefill-mode sequential"):
        load_pipeline(None, TINY, LoadOptions(prefill_mode="sequential", backends={"code_decoder": "onnx"}))


def test_parity_against_onnx(run_cli):
    p = run_cli("parity", "chatterbox", "--model-dir", TINY, "--against", "onnx", "--json", "-q")
    assert p.returncode == 0, p.err
    checks = by_name(json.loads(p.stdout)["checks"])
    assert checks["CFG prefill logits mlx vs onnx-float32 (cosine, worst row)"]["value"] >= 0.99999
    assert checks["greedy speech tokens mlx vs onnx-float32 (leading equal)"]["value"] == 20
    assert checks["CFG prefill logits mlx vs onnx-int8 (cosine, worst row)"]["value"] >= 0.999
    assert "CFG prefill logits mlx vs onnx-int4 (cosine, worst row)" in checks
    p = run_cli("parity", "chatterbox", "--model-dir", TINY, "--golden", FIX / "parity_t3.npz",
                "--code-decoder-backend", "onnx-f32", "--json", "-q")
    assert p.returncode == 0, p.err
    checks = by_name(json.loads(p.stdout)["checks"])
    assert checks["CFG prefill logits vs golden (onnx-f32) (cosine, worst row)"]["value"] >= 0.99999
    assert checks["greedy speech tokens vs golden (onnx-f32) (leading equal)"]["value"] == 20


def test_golden_fails_on_a_perturbed_t3(run_cli, tmp_path):
    """The graph is rebuilt from a perturbed checkpoint and the same goldens catch it."""
    ck = tmp_path / "ck"
    shutil.copytree(TINY, ck)
    w = mx.load(str(ck / "t3_cfg.safetensors"))
    w["tfmr.layers.1.mlp.down_proj.weight"] = w["tfmr.layers.1.mlp.down_proj.weight"] * 1.5
    mx.save_safetensors(str(ck / "t3_cfg.safetensors"), w, metadata={"format": "pt"})
    p = run_cli("parity", "chatterbox", "--model-dir", ck, "--golden", FIX / "parity_t3.npz",
                "--code-decoder-backend", "onnx-f32", "--json", "-q")
    assert p.returncode == 1
    assert not by_name(json.loads(p.stdout)["checks"])["CFG prefill logits vs golden (onnx-f32) (cosine, worst row)"][
        "passed"]


def test_cli_errors_are_one_line(run_cli, tmp_path):
    common = ("-m", "chatterbox", "--model-dir", TINY, "Hello there.", "-o", "x.wav")
    p = run_cli("speak", *common, "--code-decoder-backend", "onnx-int2")
    assert p.returncode == 2 and "onnx-int2" in only_line(p.err)
    p = run_cli("speak", *common, "--code-decoder-backend", "onnx-f32", "--dtype", "bfloat16")
    assert p.returncode == 2 and "float32" in only_line(p.err)
    p = run_cli("convert", "chatterbox", "--to", "onnx", "--dtype", "float16", "--model-dir", TINY, "-o", "out")
    assert p.returncode == 2 and "float32" in only_line(p.err)
    no_files(tmp_path)
    # converted ahead, then found by speak: the ONNX T3 runs, and as the tiny model (almost) never
    # draws its stop token, the token limit is the one line
    p = run_cli("convert", "chatterbox", "--to", "onnx", "--model-dir", TINY)
    assert p.returncode == 0, p.err
    p = run_cli("speak", *common, "--code-decoder-backend", "onnx-f32", "--max-frames", "6", "--seed", "1")
    assert p.returncode == 1 and "limit of 6 speech tokens" in only_line(p.err)
    assert not (tmp_path / "x.wav").exists()
