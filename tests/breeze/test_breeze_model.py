"""Breeze TTS 2 against goldens computed by the upstream code (scripts/goldens/breeze_tiny.py) on a
tiny checkpoint in the published layout: loader, text encoder per segment, prompt embeddings of
every mode, backbone prefill with and without CFG, 20 greedy frames (all 16 codes) with the
backbone and depth-decoder logits of each, EOS, and CFG refused where upstream raises."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import CheckpointError, UsageError

from breeze_cases import TINY, cos, read_goldens


@pytest.fixture(scope="module")
def goldens():
    return read_goldens()


@pytest.fixture(scope="module")
def loaded():
    from ttscli.models.breeze_tts.load import load_model, load_tokenizer

    model, gen = load_model(TINY)
    return model, gen, load_tokenizer(TINY, model.args)





def voice_for(g, case):
    from ttscli.models.breeze_tts.prompt import Voice

    arrays, meta = g
    if case["template"].startswith("ref_"):
        return Voice(arrays["ref_codes"], meta["request"]["ref_text"])
    return None


def instruct_for(g, case):
    return g[1]["request"]["instruction"] if case["template"] in ("tts_instruction", "ref_edit_tata") else None


# ------------------------------------------------------------------ loader
def test_loader_reads_nested_configs_not_decoys(loaded):
    model, gen, _ = loaded
    a = model.args
    assert a.backbone.rope.theta == 1e6 and a.backbone.rope.type == "default" and a.backbone.rms_norm_eps == 1e-6
    assert a.backbone.num_hidden_layers == 2 and a.backbone.qk_norm
    assert a.depth.rope.type == "llama3" and a.depth.rope.original_max_position_embeddings == 16
    assert not a.depth.qk_norm and a.codebook_size == 2048 and a.eos_id == 2051
    assert (gen.temperature, gen.top_k, gen.top_p, gen.repetition_penalty, gen.max_new_tokens) == \
        (0.9, 50, 1.0, 1.1, 750)
    # heads stay float32, and the backbone's audio table is the depth decoder's
    assert model.lm_head.weight.dtype == mx.float32
    assert model.depth_decoder.codebooks_head.weight.shape == (15, 32, 2051)


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "ck"
    shutil.copytree(TINY, dst)
    return dst


def test_loader_is_strict_but_ignores_unused_by_name(tmp_path):
    from ttscli.models.breeze_tts.load import TIED, load_model

    ck = _copy(tmp_path)
    index_path = ck / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    assert any(k.startswith("codec_model.") for k in index["weight_map"])
    assert "embed_text_tokens.weight" in index["weight_map"]
    assert TIED not in index["weight_map"]
    shard = ck / index["weight_map"]["lm_head.weight"]
    w = mx.load(str(shard))
    # the tie present (as mlx-audio's conversions store it) loads
    w2 = dict(w, **{TIED: mx.zeros((16 * 2051, 32), mx.bfloat16)})
    mx.save_safetensors(str(shard), w2, metadata={"format": "pt"})
    index["weight_map"][TIED] = shard.name
    index_path.write_text(json.dumps(index))
    load_model(ck)
    # a missing needed tensor is named
    w3 = {k: v for k, v in w.items() if k != "lm_head.weight"}
    mx.save_safetensors(str(shard), w3, metadata={"format": "pt"})
    del index["weight_map"]["lm_head.weight"], index["weight_map"][TIED]
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="missing 1: lm_head.weight"):
        load_model(ck)
    # an unknown tensor is named
    w4 = dict(w, **{"backbone_model.extra.weight": mx.zeros((2,), mx.bfloat16)})
    mx.save_safetensors(str(shard), w4, metadata={"format": "pt"})
    index["weight_map"].update({"lm_head.weight": shard.name, "backbone_model.extra.weight": shard.name})
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="unexpected 1: backbone_model.extra.weight"):
        load_model(ck)


# ------------------------------------------------------------------ prompts and components
def test_tokenizer_segments_equal_upstream_template_ids(goldens, loaded):
    from ttscli.models.breeze_tts.prompt import layouts

    model, _, tok = loaded
    arrays, meta = goldens
    for name, case in meta["cases"].items():
        if case["cfg_scale"] == 0.0:
            continue
        cond, uncond = layouts(meta["request"]["text"], instruct_for(goldens, case), voice_for(goldens, case))
        for br, parts in (("cond", cond), ("uncond", uncond)):
            if br not in case["branches"]:
                continue
            from ttscli.models.breeze_tts.prompt import build

            p = build(model, tok, parts, voice_for(goldens, case))
            assert p.segments == case["branches"][br]["segments"], (name, br)
            assert p.ids == case["branches"][br]["input_ids"], (name, br)


def test_text_encoder_per_segment(goldens, loaded):
    model, _, _ = loaded
    arrays, meta = goldens
    for name, case in meta["cases"].items():
        for br, b in case["branches"].items():
            for i, seg in enumerate(b["segments"]):
                ours = np.array(model.text_encoder(mx.array([seg]))[0])
                ref = arrays[f"{name}.{br}.segment{i}"]
                assert cos(ours, ref) >= 0.99999, (name, br, i)
                np.testing.assert_allclose(ours, ref, atol=2e-4, rtol=1e-3)


def test_prompt_embeddings_and_prefill_every_mode(goldens, loaded):
    from ttscli.models.breeze_tts.prompt import prompts

    model, _, tok = loaded
    arrays, meta = goldens
    for name, case in meta["cases"].items():
        cond, uncond, scale = prompts(model, tok, meta["request"]["text"], instruct_for(goldens, case),
                                      voice_for(goldens, case), case["cfg_scale"])
        got = {"cond": cond, "uncond": uncond}
        if case["cfg_scale"] == 0.0:   # upstream swaps the negative prompt in
            got = {"cond": None, "uncond": cond}
        for br in case["branches"]:
            p = got[br]
            if p is None:
                continue
            np.testing.assert_allclose(np.array(p.embeds[0]), arrays[f"{name}.{br}.embeds"], atol=2e-4, rtol=1e-3)
            logits, h = model(p.embeds, model.new_cache())
            assert cos(h[0], arrays[f"{name}.{br}.prefill_hidden"]) >= 0.99999, (name, br)
            # the goldens ran with the EOS row zeroed: compare the codebook-0 classes
            V = model.args.vocab_size
            assert cos(logits[0, :V], arrays[f"{name}.{br}.prefill_logits"][:V]) >= 0.99999, (name, br)


def test_cfg_refused_without_a_negative_prompt(goldens, loaded):
    from ttscli.models.breeze_tts.prompt import Voice, prompts

    model, _, tok = loaded
    assert "does not define a negative prompt" in goldens[1]["cfg_error"]
    with pytest.raises(UsageError, match="needs an instruction"):
        prompts(model, tok, "hi", None, None, 2.0)
    with pytest.raises(UsageError, match="needs an instruction"):
        prompts(model, tok, "hi", "", Voice(goldens[0]["ref_codes"], "ref"), 3.0)


# ------------------------------------------------------------------ frames
def _greedy(model, tok, goldens, case, frames, zero_eos=True):
    from ttscli.lm.sample import SamplingParams
    from ttscli.models.breeze_tts.loop import LoopConfig, generate_frames
    from ttscli.models.breeze_tts.prompt import prompts
    from ttscli.lm import MLXCodeDecoder

    eos_row = model.lm_head.weight[model.args.eos_id]
    if zero_eos:
        w = np.array(model.lm_head.weight)
        w[model.args.eos_id] = 0.0
        model.lm_head.weight = mx.array(w)
    try:
        cond, uncond, scale = prompts(model, tok, goldens[1]["request"]["text"], instruct_for(goldens, case),
                                      voice_for(goldens, case), case["cfg_scale"])
        cfg = LoopConfig(SamplingParams(1.0, 0, 1.0, 0.0, 1.1, False), SamplingParams(1.0, 0, 1.0, 0.0, 1.0, False),
                         frames, ignore_eos=zero_eos)
        trace: list = []
        out = list(generate_frames(model, MLXCodeDecoder(model, compiled=False), cond, uncond, scale, cfg,
                                   trace=trace))
        return np.stack(out) if out else np.zeros((0, 16), np.int32), trace
    finally:
        if zero_eos:
            w = np.array(model.lm_head.weight)
            w[model.args.eos_id] = np.array(eos_row)
            model.lm_head.weight = mx.array(w)


@pytest.mark.parametrize("name", ["plain", "design", "design_cfg", "clone", "direction", "direction_cfg",
                                  "design_cfg0"])
def test_greedy_frames_equal_upstream(goldens, loaded, name):
    model, _, tok = loaded
    arrays, meta = goldens
    case = meta["cases"][name]
    codes, trace = _greedy(model, tok, goldens, case, meta["frames"])
    ref = arrays[f"{name}.codes"]
    assert codes.shape == ref.shape == (20, 16)
    assert (codes == ref).all(), f"{name}: {int((codes == ref).all(axis=1).sum())}/20 frames equal"
    for t, (bl, dl) in enumerate(trace):
        assert cos(bl[0], arrays[f"{name}.backbone_logits"][t]) >= 0.99999, (name, t)
        if t < arrays[f"{name}.depth_logits"].shape[0]:
            for k in range(15):
                assert cos(dl[k][0], arrays[f"{name}.depth_logits"][t][k]) >= 0.99999, (name, t, k)


def test_backbone_eos_ends_the_utterance(goldens, loaded):
    model, _, tok = loaded
    arrays, meta = goldens
    codes, _ = _greedy(model, tok, goldens, meta["cases"]["plain"], 40, zero_eos=False)
    assert codes.shape[0] == meta["eos_frames"]
    assert (codes == arrays["eos.codes"]).all()
