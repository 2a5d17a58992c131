"""Prompt embeddings of every mode and the text tokenizer vs upstream qwen-tts goldens."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import UsageError
from ttscli.models.qwen3_tts.load import load_model, load_tokenizer
from ttscli.models.qwen3_tts.prompt import VoicePrompt, prepare

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts"
NAMES = ["tiny-base", "tiny-customvoice", "tiny-voicedesign"]


@lru_cache(maxsize=None)
def fixture(name: str):
    model, gen = load_model(FIX / name)
    tok = load_tokenizer(FIX / name)
    goldens = dict(np.load(FIX / f"{name}.goldens.npz"))
    cases = json.loads((FIX / f"{name}.cases.json").read_text())
    return model, tok, goldens, cases


def voice_of(case: dict) -> VoicePrompt | None:
    if case["mode"] != "clone":
        return None
    codes = None if case["x_vector_only"] else mx.array(np.array(case["ref_code"], np.int32))
    return VoicePrompt(mx.array(np.array(case["x_vector"], np.float32)), codes, case.get("ref_text"))


def build(model, tok, case: dict):
    return prepare(model.talker, model.args, tok, case["text"], language=case["language"],
                   speaker=case.get("speaker"), instruct=case.get("instruct"), voice=voice_of(case),
                   non_streaming=case.get("non_streaming"))


ALL_CASES = [(n, c) for n in NAMES for c in json.loads((FIX / f"{n}.cases.json").read_text())["cases"]]


@pytest.mark.parametrize("name,case_name", ALL_CASES)
def test_tokenizer_matches_upstream(name, case_name):
    _, tok, g, cases = fixture(name)
    for i, text in enumerate(cases["cases"][case_name]["tokenized_texts"]):
        assert tok.encode(text) == g[f"{case_name}/tokens{i}"].tolist()


@pytest.mark.parametrize("name,case_name", ALL_CASES)
def test_prompt_matches_upstream(name, case_name):
    model, tok, g, cases = fixture(name)
    p = build(model, tok, cases["cases"][case_name])
    for key, ours in (("prefill", p.embeds[0]), ("trailing", p.trailing[0]), ("tts_pad", p.tts_pad.reshape(-1))):
        ref = g[f"{case_name}/{key}"]
        ours = np.array(ours)
        assert ours.shape == ref.shape, key
        np.testing.assert_allclose(ours, ref, atol=2e-5, rtol=1e-5, err_msg=key)


def test_mode_errors():
    model, tok, _, _ = fixture("tiny-customvoice")
    with pytest.raises(UsageError, match="unknown voice"):
        prepare(model.talker, model.args, tok, "hi", speaker="nobody")
    with pytest.raises(UsageError, match="preset voice"):
        prepare(model.talker, model.args, tok, "hi")
    with pytest.raises(UsageError, match="unsupported language"):
        prepare(model.talker, model.args, tok, "hi", speaker="ryan", language="klingon")
    model.args.tts_model_size = "0b6"
    try:
        with pytest.raises(UsageError, match="0.6B"):
            prepare(model.talker, model.args, tok, "hi", speaker="ryan", instruct="happy")
    finally:
        model.args.tts_model_size = "1b7"
    vd, tok_vd, _, _ = fixture("tiny-voicedesign")
    with pytest.raises(UsageError, match="instruct"):
        prepare(vd.talker, vd.args, tok_vd, "hi")
    base, tok_b, _, _ = fixture("tiny-base")
    with pytest.raises(UsageError, match="reference audio"):
        prepare(base.talker, base.args, tok_b, "hi")
    with pytest.raises(UsageError, match="ref-text"):
        prepare(base.talker, base.args, tok_b, "hi", voice=VoicePrompt(mx.zeros((32,)), mx.zeros((3, 16), mx.int32)))
