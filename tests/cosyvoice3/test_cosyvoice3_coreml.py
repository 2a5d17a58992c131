"""CosyVoice3's LM as a Core ML code decoder: the package's MIL program (run with numpy,
tests/coreml/mil_interp.py) against the upstream goldens of scripts/goldens/cosyvoice3_upstream.py.
Running the package itself needs macOS (tests/coreml/test_macos.py covers the shared runtime)."""
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("coremltools")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "coreml"))
from mil_interp import InterpretedModel

from ttscli.backends.coreml.decoder import CoreMLCodeDecoder
from ttscli.backends.coreml.manifest import read_manifest
from ttscli.models.cosyvoice3.config import read_args
from ttscli.models.cosyvoice3.coreml_export import export_coreml
from ttscli.models.cosyvoice3.llm import Draw
from ttscli.models.cosyvoice3.load import load_llm

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3" / "tiny"
G = dict(np.load(TINY.parent / "goldens.npz"))


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """The package at float32 compute precision, and at float16 (the default a user converts)."""
    out = {}
    for precision in ("float32", "float16"):
        folder = tmp_path_factory.mktemp(f"cv3-coreml-{precision}")
        out[precision] = folder, export_coreml(TINY, folder, model_id="cosyvoice3-tiny", capacity=64,
                                               precision=precision)
    return out


@pytest.fixture(scope="module")
def package(packages):
    return packages["float32"]


def decoder(package, fp16: bool) -> CoreMLCodeDecoder:
    out, manifest = package
    entry = manifest["components"]["code_decoder"]
    return CoreMLCodeDecoder(InterpretedModel(out / entry["path"], fp16=fp16), entry)


def test_manifest_names_the_lm_and_its_source(package):
    out, manifest = package
    assert read_manifest(out)["family"] == manifest["family"] == "cosyvoice3"
    entry = manifest["components"]["code_decoder"]
    args = read_args(TINY)
    assert entry["kind"] == "stateful_lm_step" and entry["capacity"] == 64
    assert entry["vocab_size"] == args.speech_token_size + 200 and entry["hidden_size"] == args.lm.hidden_size
    assert list(manifest["source"]["files"]) == ["llm.pt"]


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_prefill_and_20_greedy_tokens_match_upstream(packages, precision):
    """float32 compute: upstream's log-probabilities within 1e-4 and its 20 greedy tokens;
    float16 compute with fp16 rounding of every fp16 result (what a Mac runs): the same
    tokens, log-probabilities within 1e-2."""
    args = read_args(TINY)
    lm = load_llm(TINY, args)
    fp16 = precision == "float16"
    lm.decoder = decoder(packages[precision], fp16)
    embeds = lm.prompt(G["lm_text"].tolist(), G["lm_prompt_speech"].tolist())
    logits, _ = lm.decoder.prefill(embeds, lm.decoder.new_cache())
    logp = np.array(lm.log_softmax(logits)[0])
    assert np.abs(logp - G["lm_logp"]).max() < (1e-2 if fp16 else 1e-4)
    greedy = Draw(args.sampling, np.random.default_rng(0), greedy=True)
    tokens = [t for _, t in zip(range(20), lm.generate(embeds, greedy, 0, 40))]
    assert tokens == G["lm_greedy"].tolist()


def test_a_prompt_past_the_capacity_is_refused(package):
    from ttscli.errors import GenerationError

    dec = decoder(package, False)
    with pytest.raises(GenerationError, match="holds 64 positions"):
        dec.prefill(np.zeros((1, 65, read_args(TINY).lm.hidden_size), np.float32), dec.new_cache())
