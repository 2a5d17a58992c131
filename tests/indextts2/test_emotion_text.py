"""IndexTTS2's text-to-emotion classifier against transformers (prompt ids through the chat
template, greedy ids of the Qwen3 LM) and upstream QwenEmotion's parsing
(scripts/goldens/indextts2_emotion_text.py)."""
import json
from pathlib import Path

import pytest

from ttscli.models.indextts2.emotion_text import EmotionClassifier, chat_prompt, parse_answer

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
GOLD = json.loads((FIX / "emotion_text.json").read_text())


@pytest.fixture(scope="module")
def clf():
    return EmotionClassifier.load(FIX / "tiny" / "qwen0.6bemo4-merge")


@pytest.mark.parametrize("case", GOLD["cases"], ids=lambda c: c["text"][:12])
def test_prompt_and_greedy_ids_match_transformers(clf, case):
    assert chat_prompt(case["text"]) == case["prompt"]
    assert clf.tokenizer.encode(chat_prompt(case["text"])) == case["prompt_ids"]
    assert clf.generate_ids(case["text"], max_tokens=len(case["greedy"]), stop=False) == case["greedy"]


@pytest.mark.parametrize("case", GOLD["answers"], ids=lambda c: c["answer"][:16])
def test_answers_parse_as_upstream(case):
    assert parse_answer(case["answer"], case["text"]) == pytest.approx(case["weights"])
