"""IndexTTS2's emotion vector against upstream's infer_generator branch
(scripts/goldens/indextts2_frontend.py), and the --emotion parser."""
from pathlib import Path

import numpy as np
import pytest

from ttscli.errors import UsageError
from ttscli.models.indextts2.config import EMO_NUM
from ttscli.models.indextts2.emotion import EmotionMatrices, blend, parse_vector, scale_vector

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
F = np.load(FIX / "frontend.npz")
G = np.load(FIX / "goldens.npz")


def test_blend_matches_upstream():
    mats = EmotionMatrices.load(FIX / "tiny", "feat2.pt", "feat1.pt", EMO_NUM)
    rows = mats.rows(F["style"])
    # the picked rows are upstream's find_most_similar_cosine indices
    for k, i in enumerate(F["emo_index"]):
        assert np.array_equal(rows[k], mats.emo[k][i])
    w = scale_vector(F["emo_weights"].tolist(), float(F["emo_alpha"]))
    ours = blend(G["emovec_spk"], w, rows)
    assert np.abs(ours - F["emovec_vector"]).max() <= 1e-6 * np.abs(F["emovec_vector"]).max()


def test_random_rows_stay_in_their_emotion():
    mats = EmotionMatrices.load(FIX / "tiny", "feat2.pt", "feat1.pt", EMO_NUM)
    rows = mats.rows(F["style"], rng=np.random.default_rng(0))
    for k, r in enumerate(rows):
        assert any(np.array_equal(r, e) for e in mats.emo[k])


def test_parse_vector_names_numbers_and_errors():
    assert parse_vector("happy=0.8, calm=0.2") == [0.8, 0, 0, 0, 0, 0, 0, 0.2]
    assert parse_vector("0,0,0.5,0,0,0,0,0.5") == [0, 0, 0.5, 0, 0, 0, 0, 0.5]
    for bad, words in (("joyful=0.3", "unknown emotion"), ("happy=2", "outside"), ("happy=x", "not a number"),
                       ("0.1,0.2", "8 expected"), ("", "empty")):
        with pytest.raises(UsageError, match=words):
            parse_vector(bad)


def test_alpha_scales_and_truncates_like_upstream():
    assert scale_vector([0.35, 0.5], 0.7) == [0.2449, 0.35]
    assert scale_vector([0.35], 1.5) == [0.35]
