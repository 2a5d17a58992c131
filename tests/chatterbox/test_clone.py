"""The full clone path against upstream (scripts/goldens/chatterbox_clone.py): a 24 kHz reference
-> conditionals (voice encoder, S3 tokens of the first 6 s, S3Gen's reference dict) -> T3 greedy
tokens -> S3Gen wave, with upstream's recorded flow noise and harmonic-source draws fed in."""
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

from ttscli.models.base import LoadOptions
from ttscli.models.chatterbox.load import load_pipeline
from ttscli.models.chatterbox.pipeline import speech_tokens
from ttscli.codecs.s3gen.hift import SourceDraws
from ttscli.models.chatterbox.t3 import T3Sampling
from ttscli.models.chatterbox.tokenizer import punc_norm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"
GOLD = FIX / "clone_goldens.npz"
pytestmark = pytest.mark.skipif(not GOLD.exists(), reason="clone goldens not generated")


@pytest.fixture(scope="module")
def g():
    return dict(np.load(GOLD))


@pytest.fixture(scope="module")
def pipe():
    return load_pipeline(None, FIX / "tiny", LoadOptions())


def test_clone_path_equals_upstream(pipe, g):
    conds = pipe.clone_conditionals(g["ref24"], 24000)
    np.testing.assert_allclose(conds.speaker_emb, g["speaker_emb"], atol=1e-5)
    assert conds.prompt_tokens.tolist() == g["prompt_tokens"].tolist()
    assert np.asarray(conds.gen["prompt_token"]).reshape(-1).tolist() == g["gen_prompt_token"].reshape(-1).tolist()
    np.testing.assert_allclose(np.asarray(conds.gen["prompt_feat"]).reshape(g["gen_prompt_feat"].shape),
                               g["gen_prompt_feat"], atol=1e-4)
    np.testing.assert_allclose(np.asarray(conds.gen["embedding"]).reshape(g["gen_embedding"].shape),
                               g["gen_embedding"], atol=1e-4)

    meta = json.loads((FIX / "t3_goldens.json").read_text())
    ids = pipe.tokenizer.encode(punc_norm(meta["text"]))
    n = len(g["t3_tokens"])
    s = T3Sampling(temperature=0.0, cfg_weight=0.5, max_new_tokens=n)
    toks = list(itertools.islice(pipe.t3.generate(conds.t3_cond(0.5), ids, s), n))
    assert toks == g["t3_tokens"].tolist()
    speech = speech_tokens(toks)
    assert speech.tolist() == g["speech_tokens"].tolist()

    wav = pipe.s3gen.generate(speech, conds.gen, noise=g["cfm_noise"][None],
                              source_draws=SourceDraws(mx.array(g["phase"]), mx.array(g["sine_noise"].T)))
    assert wav.shape == g["wav"].shape
    assert np.abs(wav - g["wav"]).max() <= 1e-4
