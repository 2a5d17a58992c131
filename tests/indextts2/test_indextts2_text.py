"""IndexTTS2's text side against upstream's TextTokenizer (scripts/goldens/indextts2_text.py)."""
import json
from pathlib import Path

import pytest

from ttscli.models.indextts2.text import IndexTokenizer, punctuate, split_segments

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
GOLD = json.loads((FIX / "text.json").read_text())


@pytest.fixture(scope="module")
def tok():
    return IndexTokenizer(FIX / "tiny" / "bpe.model")


@pytest.mark.parametrize("case", GOLD["cases"], ids=lambda c: c["text"][:24])
def test_pieces_ids_and_segments_match_upstream(tok, case):
    pieces = tok.pieces(case["text"])
    assert pieces == case["pieces"]
    assert tok.ids(pieces) == case["ids"]
    assert split_segments(pieces, 120) == case["segments_120"]
    assert split_segments(pieces, 12) == case["segments_12"]
    assert split_segments(pieces, 12, quick_tokens=4) == case["segments_12_quick4"]


def test_unknown_pieces_map_to_unk(tok):
    assert tok.unk_id == GOLD["unk_id"]
    assert tok.unk_id in tok.ids(tok.pieces("Zebra ☃ quiz"))


def test_punctuation_map_and_contractions():
    assert punctuate("Where's it: (here)") == "Where is it, 'here'"
    assert punctuate("你好：世界$") == "你好,世界."
    assert punctuate("不要chong2蹈, 去ju4") == "不要chong2蹈, 去jv4"


def test_missing_bpe_model_is_one_checkpoint_error(tmp_path):
    from ttscli.errors import CheckpointError

    with pytest.raises(CheckpointError, match="bpe.model"):
        IndexTokenizer(tmp_path / "bpe.model")
