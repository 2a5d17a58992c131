"""ttscli's VoxCPM2 tokenizer (tokenizers + upstream's CJK split) against upstream's own
LlamaTokenizerFast + mask_multichar_chinese_tokens: text -> ids on the goldens' texts and on
texts that reach the split, unknown characters and a voice-design prefix
(scripts/goldens/voxcpm2_tokenizer.py, scripts/goldens/voxcpm2_upstream.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "voxcpm2"
ROWS = json.loads((FIX / "tokenizer_ids.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tokenizer():
    from ttscli.models.voxcpm2.tokenizer import load_tokenizer

    return load_tokenizer(FIX / "tiny")


@pytest.mark.parametrize("row", ROWS, ids=[r["text"] or "empty" for r in ROWS])
def test_text_to_ids_matches_upstream(tokenizer, row):
    assert tokenizer.encode(row["text"]) == row["ids"]


def test_goldens_texts_match_upstream_ids(tokenizer):
    g = np.load(FIX / "goldens.npz")
    assert tokenizer.encode(str(g["text"])) == g["ids_0"].tolist()
    assert tokenizer.encode(str(g["text"])) + [101] == g["plain_tokens"][0].tolist()


def test_a_missing_tokenizer_is_named(tmp_path):
    from ttscli.errors import CheckpointError
    from ttscli.models.voxcpm2.tokenizer import load_tokenizer

    with pytest.raises(CheckpointError, match="tokenizer.json is missing"):
        load_tokenizer(tmp_path)
