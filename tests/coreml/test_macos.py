"""The talker package through the real Core ML runtime, vs MLX and vs the upstream goldens.

Run on macOS 15+ (Apple Silicon): ``pytest -m macos tests/coreml``. Skipped elsewhere.
"""
import shutil

import numpy as np
import pytest
from coreml_common import CAPACITY, CHECKPOINT

from ttscli.backends.coreml import coreml_available
from ttscli.errors import CheckpointError, GenerationError

_ok, _why = coreml_available()
pytestmark = [pytest.mark.macos, pytest.mark.skipif(not _ok, reason=_why or "Core ML unavailable")]


def cosine_rows(a, b):
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.fixture(scope="module")
def mlx_model():
    from ttscli.models.qwen3_tts.load import load_model

    model, _ = load_model(CHECKPOINT, "float32")
    return model


def _talker(pk, compute_units="cpu_and_gpu"):
    from ttscli.backends.coreml.decoder import CoreMLCodeDecoder

    folder, manifest = pk
    return CoreMLCodeDecoder.open(folder, compute_units=compute_units, manifest=manifest)


@pytest.mark.parametrize("units", ["cpu_and_gpu", "all"])
def test_talker_logits_cosine_vs_mlx(packages, mlx_model, goldens, units):
    import mlx.core as mx

    talker = _talker(packages, units)
    e = goldens["talker_embeds"]
    cache = talker.new_cache()
    got = np.concatenate([talker.step(row[None, None], cache)[0] for row in e])
    tk = mlx_model.talker
    mcache = tk.new_cache()
    want = np.concatenate([np.array(tk(mx.array(row[None, None]), mcache)[0]) for row in e])
    assert cosine_rows(got, want).min() > 0.999
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    assert cosine_rows(got, goldens["talker_logits"]).min() > 0.999


def test_talker_fp32_package_matches_upstream(packages_fp32, goldens):
    talker = _talker(packages_fp32, "cpu_only")
    cache = talker.new_cache()
    logits, hidden = talker.prefill(goldens["talker_embeds"][None], cache)
    np.testing.assert_allclose(logits[0], goldens["talker_logits"][-1], atol=1e-3)
    np.testing.assert_allclose(hidden[0], goldens["talker_hidden"][-1], atol=1e-3)


def test_capacity_error_on_device(packages, goldens):
    talker = _talker(packages)
    cache = talker.new_cache()
    e = np.resize(goldens["talker_embeds"], (CAPACITY, goldens["talker_embeds"].shape[1]))
    talker.prefill(e[None], cache)
    with pytest.raises(GenerationError, match=f"holds {CAPACITY} positions"):
        talker.step(e[0][None, None], cache)


def test_open_finds_the_conversion_of_this_checkpoint_only(tmp_path, monkeypatch):
    """The converted cache is searched by the manifest's source hashes."""
    from ttscli.backends.coreml.decoder import open_code_decoder
    from ttscli.models.qwen3_tts.coreml_export import export_coreml
    from ttscli.paths import converted_dir

    monkeypatch.setenv("TTSCLI_CACHE", str(tmp_path / "cache"))
    export_coreml(CHECKPOINT, converted_dir("qwen3-tts-0.6b-customvoice", "coreml"),
                  model_id="qwen3-tts-0.6b-customvoice", capacity=16)
    dec = open_code_decoder(CHECKPOINT)
    cache = dec.new_cache()
    logits, _ = dec.prefill(np.zeros((1, 2, dec.hidden_size), np.float32), cache)
    assert logits.shape == (1, dec.vocab_size) and cache.offset == 2
    other = tmp_path / "other"
    shutil.copytree(CHECKPOINT, other)
    with open(other / "model.safetensors", "ab") as f:
        f.write(b"\0")
    with pytest.raises(CheckpointError, match="no Core ML code_decoder converted from"):
        open_code_decoder(other)
