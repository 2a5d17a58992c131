"""T3 as a Core ML code decoder: the package's MIL program (run with numpy, tests/coreml/mil_interp.py)
against the upstream goldens, two rows for CFG.  Running the package itself needs macOS
(tests/coreml/test_macos.py covers the shared runtime)."""
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("coremltools")
mx = pytest.importorskip("mlx.core")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coreml"))
from mil_interp import InterpretedModel

from ttscli.backends.coreml.decoder import CoreMLCodeDecoder
from ttscli.backends.coreml.manifest import read_manifest
from ttscli.models.chatterbox.coreml_export import RowwiseDecoder, export_coreml
from ttscli.models.chatterbox.load import load_conds, load_t3, load_tokenizer
from ttscli.models.chatterbox.t3 import T3Sampling
from ttscli.models.chatterbox.tokenizer import punc_norm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"
G = np.load(FIX / "t3_goldens.npz")


@pytest.mark.slow
def test_coreml_t3_matches_goldens(tmp_path):
    import json

    manifest = export_coreml(FIX / "tiny", tmp_path, model_id="chatterbox-tiny", capacity=96, precision="float32")
    assert read_manifest(tmp_path)["family"] == manifest["family"] == "chatterbox"
    entry = manifest["components"]["code_decoder"]
    inner = CoreMLCodeDecoder(InterpretedModel(tmp_path / entry["path"], fp16=False), entry)
    dec = RowwiseDecoder(inner)
    t3, conds = load_t3(FIX / "tiny"), load_conds(FIX / "tiny")
    meta = json.loads((FIX / "t3_goldens.json").read_text())
    ids = load_tokenizer(FIX / "tiny").encode(punc_norm(meta["text"]))
    logits, _ = dec.prefill(t3.prefill_embeds(conds.t3_cond(0.5), ids, cfg=True), dec.new_cache())
    got, ref = np.array(logits), G["prefill_logits_exag5"]
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.9999, cos          # fp16 weights and caches
    s = T3Sampling(temperature=0.0, cfg_weight=0.5, max_new_tokens=10)
    toks = list(itertools.islice(t3.generate(conds.t3_cond(0.5), ids, s, decoder=RowwiseDecoder(inner)), 10))
    assert toks == G["greedy_rp12"][:10].tolist()
