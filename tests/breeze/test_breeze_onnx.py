"""Breeze TTS 2's per-frame LM work on onnxruntime (backbone + lm_head, and the depth decoder with
its 15 heads behind one input-picked output), built from the tiny published-layout checkpoint by the
shared ONNX LM export, checked against the upstream goldens (scripts/goldens/breeze_tiny.py) and
the MLX model: prefill of every mode, 20/20 greedy frames with and without CFG, the depth
decoder's logits; int8 against float32; the conversion found by source hashes and rebuilt when
stale; the CLI's refusals as one line."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
mx = pytest.importorskip("mlx.core")

from clitools import by_name, only_line

from ttscli.backends.onnx.graph import Quant
from ttscli.backends.onnx.manifest import built_from, read_manifest

from breeze_cases import TINY, cos, greedy, prompts_for, read_goldens

MODEL_ID = "breeze-tts-2"
CASES = ["plain", "design", "design_cfg", "clone", "direction", "direction_cfg", "design_cfg0"]
SOURCE = ("config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
          "model-00002-of-00002.safetensors")



@pytest.fixture(scope="module")
def goldens():
    return read_goldens()


@pytest.fixture(scope="module")
def loaded():
    from ttscli.models.breeze_tts.load import load_model, load_tokenizer

    model, _ = load_model(TINY)
    return model, load_tokenizer(TINY, model.args)


def _export(tmp_path_factory, precision: str):
    from ttscli.models.breeze_tts.onnx_export import export_checkpoint

    out = tmp_path_factory.mktemp(f"breeze-onnx-{precision}")
    return out, export_checkpoint(TINY, out, Quant(precision), model_id=MODEL_ID)


@pytest.fixture(scope="module")
def f32(tmp_path_factory):
    return _export(tmp_path_factory, "float32")


@pytest.fixture(scope="module")
def int8(tmp_path_factory):
    return _export(tmp_path_factory, "int8")


def decoder(folder, model):
    from ttscli.models.breeze_tts.onnx_decoder import open_decoder

    return open_decoder(folder, model)






# ------------------------------------------------------------------ the graphs and their manifest
def test_manifest_names_both_graphs_and_hashes_every_source_file(f32, loaded, tmp_path):
    folder, manifest = f32
    model, _ = loaded
    a = model.args
    assert read_manifest(folder) == manifest
    assert (manifest["model"], manifest["family"], manifest["format"]) == (MODEL_ID, "breeze_tts", "ttscli-onnx")
    assert set(manifest["components"]) == {"code_decoder", "depth_decoder"}
    b, d = manifest["components"]["code_decoder"], manifest["components"]["depth_decoder"]
    assert b["path"] == "backbone.onnx" and b["heads"] == ["logits"] and b["vocab_size"] == a.vocab_size + 1
    assert b["lm"]["qk_norm"] and b["lm"]["rope"]["theta"] == 1e6 and b["layers"] == a.backbone.num_hidden_layers
    # the depth decoder: Llama blocks (llama3 RoPE), the projector in front, 15 heads behind one input
    assert d["path"] == "depth_decoder.onnx" and d["heads"] == ["logits"]
    assert d["head_select"] == {"input": "head", "count": a.num_codebooks - 1}
    assert not d["lm"]["qk_norm"] and d["lm"]["rope"]["type"] == "llama3"
    assert d["max_positions"] == a.num_codebooks and d["input_size"] == a.audio_embed_size
    assert d["hidden_size"] == a.depth.hidden_size and d["vocab_size"] == a.vocab_size
    assert manifest["precision"] == "float32" and b["precision"] == d["precision"] == "float32"
    assert sorted(manifest["source"]["files"]) == sorted(SOURCE)
    assert built_from(manifest, TINY)
    other = tmp_path / "ck"
    shutil.copytree(TINY, other, ignore=shutil.ignore_patterns("audio_tokenizer"))
    assert built_from(manifest, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["depth_decoder_config"]["rms_norm_eps"] = 1e-6       # baked into the graph: stale
    (other / "config.json").write_text(json.dumps(cfg))
    assert not built_from(manifest, other)


# ------------------------------------------------------------------ numbers against upstream
def test_prefill_every_mode_matches_upstream(f32, loaded, goldens):
    model, tok = loaded
    arrays, meta = goldens
    dec = decoder(f32[0], model)
    V = model.args.vocab_size
    for name in CASES:
        case = meta["cases"][name]
        cond, uncond, _ = prompts_for(model, tok, goldens, case)
        got = {"cond": cond, "uncond": uncond} if case["cfg_scale"] != 0.0 else {"cond": None, "uncond": cond}
        for br in case["branches"]:
            if got[br] is None:
                continue
            logits, hidden = dec.prefill(got[br].embeds, dec.new_cache())
            assert cos(hidden[0], arrays[f"{name}.{br}.prefill_hidden"]) >= 0.99999, (name, br)
            assert cos(logits[0, :V], arrays[f"{name}.{br}.prefill_logits"][:V]) >= 0.99999, (name, br)
            want, _ = model(got[br].embeds, model.new_cache())
            assert cos(logits, want) >= 0.99999, (name, br)     # the EOS class too


@pytest.mark.parametrize("name", ["plain", "design_cfg", "direction_cfg", "design_cfg0"])
def test_greedy_frames_and_depth_logits_equal_upstream(f32, loaded, goldens, name):
    model, tok = loaded
    arrays, meta = goldens
    codes, trace = greedy(model, tok, goldens, meta["cases"][name], decoder(f32[0], model), meta["frames"])
    ref = arrays[f"{name}.codes"]
    assert codes.shape == ref.shape == (20, 16)
    assert (codes == ref).all(), f"{name}: {int((codes == ref).all(axis=1).sum())}/20 frames equal"
    V = model.args.vocab_size
    depth_ref = arrays[f"{name}.depth_logits"]
    for t, (bl, dl) in enumerate(trace):
        assert cos(np.array(bl[0, :V]), arrays[f"{name}.backbone_logits"][t][:V]) >= 0.99999, (name, t)
        if t < depth_ref.shape[0]:
            for k in range(len(dl)):
                assert cos(np.array(dl[k][0]), depth_ref[t][k]) >= 0.99999, (name, t, k)


def test_depth_frame_matches_mlx_with_and_without_guidance(f32, loaded):
    """The same inputs and forced codes through both depth decoders, codebook by codebook."""
    model, _ = loaded
    a = model.args
    dec = decoder(f32[0], model)
    hidden = mx.random.normal((2, a.hidden_size), key=mx.random.key(3))
    forced = np.random.default_rng(0).integers(0, a.codebook_size, a.num_codebooks)

    def force(z, k):
        return mx.array([int(forced[k])])

    for rows, scale, one_run in ((hidden[:1], None, True), (hidden, 2.5, True), (hidden, 2.5, False)):
        dec.depth.rows_in_one_run = one_run      # CFG's rows as one batch, or a run (and cache) per row
        c_ref, l_ref = model.depth_frame(rows, mx.array([int(forced[0])]), force, scale)
        c_onnx, l_onnx = dec.depth_frame(rows, mx.array([int(forced[0])]), force, scale)
        assert np.array_equal(np.array(c_ref), np.array(c_onnx)) and np.array(c_onnx).shape == (1, 15)
        assert len(l_onnx) == a.num_codebooks - 1
        for k, (x, y) in enumerate(zip(l_ref, l_onnx)):
            assert y.shape == (1, a.vocab_size) and cos(x, y) >= 0.99999, (scale, k)


def test_int8_logits_close_to_float32(f32, int8, loaded, goldens):
    model, tok = loaded
    _, meta = goldens
    assert int8[1]["precision"] == "int8"
    assert all(e["block_size"] == 32 and e["precision"] == "int8" for e in int8[1]["components"].values())
    d32, d8 = decoder(f32[0], model), decoder(int8[0], model)
    cond, _, _ = prompts_for(model, tok, goldens, meta["cases"]["direction"])
    l32, h32 = d32.prefill(cond.embeds, d32.new_cache())
    l8, _ = d8.prefill(cond.embeds, d8.new_cache())
    assert cos(l8, l32) >= 0.999
    forced = [7] * model.args.num_codebooks

    def force(z, k):
        return mx.array([forced[k]])

    _, z32 = d32.depth_frame(h32, mx.array([7]), force)
    _, z8 = d8.depth_frame(h32, mx.array([7]), force)
    assert min(cos(x, y) for x, y in zip(z32, z8)) >= 0.999


# ------------------------------------------------------------------ finding the conversion; the pipeline
def test_conversion_found_by_hashes_and_rebuilt_when_stale(tmp_path, monkeypatch, capfd):
    from ttscli.models.breeze_tts.onnx_export import find_or_build
    from ttscli.paths import converted_dir

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    ck = tmp_path / "ck"
    shutil.copytree(TINY, ck, ignore=shutil.ignore_patterns("audio_tokenizer"))
    out = find_or_build(ck, Quant("int4", 32), MODEL_ID)
    assert out == converted_dir(MODEL_ID, "onnx-int4") and "building the ONNX int4 graphs" in capfd.readouterr().err
    stamp = (out / "manifest.json").stat().st_mtime_ns
    assert find_or_build(ck, Quant("int4", 32), MODEL_ID) == out
    assert (out / "manifest.json").stat().st_mtime_ns == stamp and capfd.readouterr().err == ""
    with open(ck / "model-00002-of-00002.safetensors", "ab") as f:   # the checkpoint changed: stale
        f.write(b"\0")
    assert find_or_build(ck, Quant("int4", 32), MODEL_ID) == out
    assert "building" in capfd.readouterr().err and built_from(read_manifest(out), ck)
    assert find_or_build(ck, Quant("int4", 64), MODEL_ID) == out    # another block size is another build
    assert read_manifest(out)["components"]["depth_decoder"]["block_size"] == 64
    assert not list(out.parent.glob(".*partial"))


def test_pipeline_on_onnx_speaks_as_upstream(tmp_path, monkeypatch, goldens):
    """load_pipeline with --code-decoder-backend onnx-f32: the conversion built into the cache,
    CFG's branches each with their own cache, greedy frames and the EOS frame as upstream."""
    from ttscli.generate import Request
    from ttscli.models.base import LoadOptions
    from ttscli.models.breeze_tts.load import load_pipeline
    from ttscli.paths import converted_dir

    arrays, meta = goldens
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))

    class Spec:
        id, sample_rate, defaults = MODEL_ID, 24000, {}

    from ttscli.errors import UsageError

    with pytest.raises(UsageError, match="prefill-mode sequential is MLX's"):
        load_pipeline(Spec(), TINY, LoadOptions(backends={"code_decoder": "onnx"}, prefill_mode="sequential"))
    pipe = load_pipeline(Spec(), TINY, LoadOptions(backends={"code_decoder": "onnx"}))
    assert pipe.backends["code_decoder"] == "onnx-int8"         # int8: the CPU default
    pipe = load_pipeline(Spec(), TINY, LoadOptions(backends={"code_decoder": "onnx-f32"}))
    assert pipe.backends["code_decoder"] == "onnx-float32" and pipe.backends["code_predictor"] == "onnx"
    assert (converted_dir(MODEL_ID, "onnx-float32") / "manifest.json").is_file()
    req = meta["request"]
    r = Request(text=req["text"], instruct=req["instruction"], max_frames=meta["frames"], ignore_eos=True,
                knobs={"cfg_scale": 3.0, "do_sample": False})
    codes = np.stack(list(pipe.frames(r)))
    assert (codes == arrays["design_cfg.codes"]).all(), \
        f"{int((codes == arrays['design_cfg.codes']).all(axis=1).sum())}/20 frames equal"
    codes = np.stack(list(pipe.frames(Request(text=req["text"], max_frames=40, knobs={"do_sample": False}))))
    assert codes.shape[0] == meta["eos_frames"] and (codes == arrays["eos.codes"]).all()


def test_sampled_frames_equal_mlx_with_the_same_seed(f32, loaded, goldens):
    """The depth decoder's draws go through the family's sampler with the same keys: sampled
    frames on onnxruntime float32 equal MLX's."""
    from ttscli.lm import MLXCodeDecoder
    from ttscli.models.breeze_tts.loop import LoopConfig, generate_frames
    from ttscli.models.breeze_tts.config import GenerationConfig

    model, tok = loaded
    _, meta = goldens
    cond, uncond, scale = prompts_for(model, tok, goldens, meta["cases"]["design_cfg"])
    cfg = LoopConfig.from_generation_config(GenerationConfig(), max_frames=12)
    cfg.ignore_eos = True
    ref = np.stack(list(generate_frames(model, MLXCodeDecoder(model, compiled=False), cond, uncond, scale, cfg,
                                        seed=5)))
    ours = np.stack(list(generate_frames(model, decoder(f32[0], model), cond, uncond, scale, cfg, seed=5)))
    assert (ours == ref).all(), f"{int((ours == ref).all(axis=1).sum())}/12 frames equal"


# ------------------------------------------------------------------ the CLI
def error_line(err: str) -> str:
    """The one error line, after the licence note every Breeze command prints first."""
    return only_line("\n".join(ln for ln in err.splitlines() if not ln.startswith("note: Breeze TTS 2 weights")))


@pytest.mark.slow
def test_cli_convert_speak_parity_and_refusals(run_cli, tmp_path):
    env = {"TTSCLI_CACHE": str(tmp_path / "own-cache")}
    base = ("speak", "-m", MODEL_ID, "--model-dir", TINY, "--no-do-sample", "--max-frames", "40")
    p = run_cli(*base, "--code-decoder-backend", "onnx-int3", "hi", "-o", "a.wav", env=env)
    assert p.returncode == 2 and "'onnx-int3' is not one of" in error_line(p.err)
    p = run_cli(*base, "--code-decoder-backend", "onnx", "--dtype", "bfloat16", "hi", "-o", "a.wav", env=env)
    assert p.returncode == 2 and "float32" in error_line(p.err) and "--dtype" in p.err
    p = run_cli("convert", MODEL_ID, "--to", "onnx", "-q", "--q-bits", "3", "--model-dir", TINY, "-o", "x", env=env)
    assert p.returncode == 2 and "choose 4 or 8" in error_line(p.err) and not (tmp_path / "x").exists()
    p = run_cli("convert", MODEL_ID, "--to", "onnx", "--dtype", "float16", "--model-dir", TINY, "-o", "x", env=env)
    assert p.returncode == 2 and "drop --dtype" in error_line(p.err) and not (tmp_path / "x").exists()
    assert not (tmp_path / "a.wav").exists()

    p = run_cli("convert", MODEL_ID, "--to", "onnx", "--model-dir", TINY, env=env)
    assert p.returncode == 0, p.err
    folder = tmp_path / "own-cache" / "converted"
    manifests = list(folder.rglob("manifest.json"))
    assert len(manifests) == 1 and json.loads(manifests[0].read_text())["precision"] == "float32"
    # greedy float32 frames end as upstream's do (int8's drift need not reach the EOS class in 40 frames)
    p = run_cli(*base, "--code-decoder-backend", "onnx-f32", "Hello the world (laugh) 你好[笑]!", "-o", "a.wav",
                env=env)
    assert p.returncode == 0, p.err
    assert "building" not in p.err                      # the conversion above was found by its hashes
    import soundfile as sf

    audio, sr = sf.read(tmp_path / "a.wav")
    assert sr == 24000 and audio.size > 0

    p = run_cli("parity", MODEL_ID, "--model-dir", TINY, "--against", "onnx-f32", "--json", env=env)
    assert p.returncode == 0, p.err
    checks = by_name(json.loads(p.stdout)["checks"])
    assert all(c["passed"] for c in checks.values()), checks
    assert checks["greedy frames mlx vs onnx-float32, all 16 codes (cfg 3)"]["value"] == 20
    p = run_cli("parity", MODEL_ID, "--model-dir", TINY, "--against", "coreml", env=env)
    assert p.returncode == 2 and "--against coreml" in error_line(p.err)


def test_graphs_of_the_in_memory_model_as_for_random_weights(loaded, goldens, tmp_path, monkeypatch):
    """`--random-weights` builds the graphs from the MLX model in memory (cached by a fingerprint
    of its weights); from the tiny model they speak as upstream."""
    from ttscli.models.breeze_tts.onnx_export import build_from_model

    model, tok = loaded
    arrays, meta = goldens
    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    folder = build_from_model(model, Quant("float32"))
    assert folder.parent == tmp_path / "cache" / "onnx-random"
    stamp = (folder / "manifest.json").stat().st_mtime_ns
    assert build_from_model(model, Quant("float32")) == folder
    assert (folder / "manifest.json").stat().st_mtime_ns == stamp
    assert build_from_model(model, Quant("int8")) != folder
    codes, _ = greedy(model, tok, goldens, meta["cases"]["design_cfg"], decoder(folder, model), meta["frames"])
    assert (codes == arrays["design_cfg.codes"]).all()


def test_graphs_of_a_bfloat16_model_widen_its_weights(goldens, tmp_path, monkeypatch):
    """A bfloat16 MLX model (random weights default to it) is widened tensor by tensor: the graph
    computes what the model's own weights compute."""
    from ttscli.models.breeze_tts.load import load_model, load_tokenizer
    from ttscli.models.breeze_tts.onnx_export import build_from_model

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    model, _ = load_model(TINY, "bfloat16")
    assert model.backbone_model.layers[0].self_attn.q_proj.weight.dtype == mx.bfloat16
    dec = decoder(build_from_model(model, Quant("float32")), model)
    _, meta = goldens
    cond, _, _ = prompts_for(model, load_tokenizer(TINY, model.args), goldens, meta["cases"]["plain"])
    x = cond.embeds.astype(mx.float32)
    logits, _ = dec.prefill(x, dec.new_cache())
    want, _ = model(cond.embeds, model.new_cache())
    assert cos(logits, want) >= 0.999
