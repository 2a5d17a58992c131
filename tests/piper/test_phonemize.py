"""Our espeak-ng phonemization gives exactly the ids piper-tts 1.8 feeds its model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ttscli.models.piper.phonemize import classify_clause, phoneme_ids, phonemize, text_to_ids

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "piper"

GOLDEN = json.loads((FIXTURES / "phoneme_ids.json").read_text(encoding="utf-8"))


def test_corpus_is_big_enough():
    assert len(GOLDEN["cases"]) >= 100
    assert GOLDEN["piper_tts"].startswith("1.8")


def test_ids_equal_piper_tts_on_corpus(id_map):
    wrong = [(c["text"], ["".join(s) for s in phonemize(c["text"])], c["phonemes"])
             for c in GOLDEN["cases"] if text_to_ids(c["text"], id_map) != c["ids"]]
    assert not wrong, f"{len(wrong)} texts differ, first: {wrong[0]}"


def test_sentences_and_terminators(id_map):
    sentences = phonemize("Hello, world. How are you? Fine!")
    assert len(sentences) == 3
    assert "".join(sentences[0]).endswith("wˈɜːld.")
    assert ", " in "".join(sentences[0])
    assert sentences[1][-1] == "?" and sentences[2][-1] == "!"


def test_id_layout_is_bos_pad_interleaved_eos(id_map):
    ids = phoneme_ids(list("ab"), id_map)
    assert ids == [1, 0, id_map["a"][0], 0, id_map["b"][0], 0, 2]
    assert phoneme_ids(["\u2603"], id_map) == [1, 0, 2]          # unknown phoneme: skipped


@pytest.mark.parametrize("text", ["", "   ", "😀😀", "中文", "\u200b", "a\x00b", "\ud800x", "…", "!!!", "--"])
def test_odd_text_never_crashes(text, id_map):
    for ids in text_to_ids(text, id_map):
        assert ids[0] == 1 and ids[-1] == 2


@pytest.mark.parametrize("clause,eof,expected", [
    ("Hello, ", False, (",", False)),
    ("world. ", False, (".", True)),
    ("Really?! ", False, ("?", True)),
    ("wait... ", False, ("", False)),
    ("well \u2014 ", False, (";", False)),
    ("One\n\n", False, ("", True)),
    ("end", True, ("", True)),
    ('said "stop!"', True, ("!", True)),
    ("\u4e2d\u6587\u3002", True, ("", True)),
])
def test_clause_terminators(clause, eof, expected):
    assert classify_clause(clause, eof) == expected
