"""IndexTTS2's semantic GPT as a Core ML package (coreml_export.py): the package's MIL program
(run with numpy, tests/coreml/mil_interp.py) against the same upstream goldens as the MLX GPT
(scripts/goldens/indextts2_upstream.py, scripts/goldens/indextts2_beams.py), beams included (each
beam its own state, reordered by copying states). Running the package itself needs macOS."""
import sys
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("yaml")
pytest.importorskip("coremltools")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coreml"))
from gptcheck import FIX, STOP, B, G, cosine, prompt, run, tiny_gpt
from mil_interp import InterpretedModel

from ttscli.backends.coreml.decoder import CoreMLCodeDecoder
from ttscli.backends.coreml.manifest import read_manifest, source_files
from ttscli.errors import GenerationError
from ttscli.lm.sample import SamplingParams
from ttscli.models.indextts2.coreml_export import SOURCE_FILES, CoreMLGPT, export_gpt


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    out = {}
    for precision in ("float32", "float16"):
        folder = tmp_path_factory.mktemp(f"indextts2-coreml-{precision}")
        record = {"checkpoint": str(FIX / "tiny"), "files": source_files(FIX / "tiny", SOURCE_FILES)}
        out[precision] = folder, export_gpt(tiny_gpt(), folder, model_id="indextts2-tiny", source=record,
                                            capacity=128, precision=precision)
    return out


def coreml_gpt(packages, precision: str = "float32"):
    folder, manifest = packages[precision]
    entry = manifest["components"]["code_decoder"]
    gpt = tiny_gpt()
    gpt.decoder = CoreMLGPT(CoreMLCodeDecoder(InterpretedModel(folder / entry["path"], fp16=precision == "float16"),
                                              entry))
    return gpt


@pytest.fixture(scope="module")
def gpt(packages):
    return coreml_gpt(packages)


@pytest.fixture(scope="module")
def embeds(gpt):
    return prompt(gpt)


def test_manifest_names_the_gpt_and_gpt_pth(packages):
    folder, manifest = packages["float32"]
    assert read_manifest(folder)["family"] == "indextts2"
    entry = manifest["components"]["code_decoder"]
    assert entry["vocab_size"] == 66 and entry["hidden_size"] == 32 and entry["lm"]["rope"]["type"] == "none"
    assert list(manifest["source"]["files"]) == ["gpt.pth"]


def test_prefill(gpt, embeds):
    logits, hidden = gpt.prefill(embeds, gpt.make_cache(), return_hidden=True)
    assert logits.shape == (1, 66) and hidden.shape == (1, 32)
    assert cosine(np.array(hidden[0]), G["prefill_hidden"]) >= 0.99999
    assert cosine(np.array(logits[0]), G["prefill_logits"]) >= 0.99999
    assert np.abs(np.array(logits[0]) - G["prefill_logits"]).max() <= 1e-4 * np.abs(G["prefill_logits"]).max()


@pytest.mark.parametrize("name,penalty", [("greedy", 1.0), ("greedy_rep", 10.0)])
def test_greedy_codes(gpt, embeds, name, penalty):
    p = SamplingParams(do_sample=False, repetition_penalty=penalty)
    assert run(gpt, embeds, p, max_tokens=20, min_tokens=20) == (G[name].tolist(), False)


@pytest.mark.parametrize("name", ["beam_free", "beam_lp2", "beam_short"])
def test_upstream_beam_search(gpt, embeds, name):
    """Beam rows reordered by copying Core ML states give upstream's codes."""
    ref = B[name].tolist()
    lo, hi = int(B[name + "_min"]), int(B[name + "_max"])
    codes, limit = run(gpt, embeds, SamplingParams(do_sample=False, repetition_penalty=10.0), max_tokens=hi,
                       min_tokens=lo, num_beams=3, length_penalty=2.0 if name == "beam_lp2" else 0.0)
    stopped = ref[-1] == STOP
    assert codes == (ref[:-1] if stopped else ref)
    assert limit == (not stopped and lo < hi)


def test_float16_package_gives_the_greedy_codes(packages):
    """float16 compute with fp16 rounding of every fp16 result (as a Mac computes)."""
    gpt = coreml_gpt(packages, "float16")
    p = SamplingParams(do_sample=False, repetition_penalty=10.0)
    assert run(gpt, prompt(gpt), p, max_tokens=20, min_tokens=20) == (G["greedy_rep"].tolist(), False)


def test_select_rows_copies_states(gpt, embeds):
    """Rows 1 and 2 become copies of rows 0 and 1 (read before any is written): each row then
    continues as its source did."""
    cache = gpt.make_cache()
    gpt.prefill(embeds, cache)
    gpt.decoder.select_rows(cache, [0, 0, 0])
    first = gpt.step(mx.array([3, 5, 7]), 0, cache)              # three rows, three histories
    gpt.decoder.select_rows(cache, [2, 0, 1])
    again = gpt.step(mx.array([9, 9, 9]), 1, cache)
    alone = []
    for code in (7, 3, 5):
        c = gpt.make_cache()
        gpt.prefill(embeds, c)
        gpt.step(mx.array([code]), 0, c)
        alone.append(np.array(gpt.step(mx.array([9]), 1, c))[0])
    np.testing.assert_allclose(np.array(again), np.stack(alone), rtol=0, atol=1e-5)
    assert first.shape == (3, 66) and [c.offset for c in cache] == [cache[0].offset] * 3


def test_codes_past_the_capacity_are_refused(gpt, embeds):
    cache = gpt.make_cache()
    with pytest.raises(GenerationError, match="semantic GPT holds 128 positions"):
        gpt.decoder(mx.zeros((1, 129, 32)), cache)


def test_a_segment_past_the_packages_capacity_is_refused_before_any_code(packages):
    from ttscli.api import load
    from ttscli.errors import UsageError
    from ttscli.generate import synthesize
    from ttscli.models.base import Request

    pipe = load("indextts2", model_dir=FIX / "tiny")
    folder, manifest = packages["float32"]
    entry = manifest["components"]["code_decoder"]
    pipe.gpt.decoder = CoreMLGPT(CoreMLCodeDecoder(InterpretedModel(folder / entry["path"], fp16=False), entry))
    ref = np.load(FIX / "frontend.npz")["ref22"]
    req = Request(text="Hello there.", ref_audio=ref, ref_sample_rate=22050, max_frames=120)
    with pytest.raises(UsageError, match="positions; the Core ML GPT holds 128"):
        list(synthesize(pipe, req))
