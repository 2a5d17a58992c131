"""w2v-BERT 2.0 semantic features (ttscli/codecs/w2vbert) against transformers' own classes.

Fixtures from scripts/goldens/w2vbert_transformers.py: ``tiny/`` is ``Wav2Vec2BertModel``
(``relative_key`` attention, macaron swish feed-forwards, causal depthwise conv module, the mask
embedding present) saved by ``save_pretrained`` with the published ``preprocessor_config.json``;
``goldens.npz`` holds ``SeamlessM4TFeatureExtractor`` outputs and every ``hidden_states[k]`` for a
signal with an odd fbank frame count (the last row is padding-masked) and one with an even count.
"""
import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.checkpoint import read_safetensors
from ttscli.codecs.w2vbert import (SeamlessArgs, W2VBertArgs, Wav2Vec2BertModel, load_w2vbert, random_w2vbert,
                                   read_stats, seamless_features, seamless_inputs, semantic_features)
from ttscli.errors import AudioInputError, CheckpointError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "w2vbert"
TINY = FIX / "tiny"
CASES = ("", "_even")


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(FIX / "goldens.npz"))


@pytest.fixture(scope="module")
def model():
    return load_w2vbert(TINY)


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def close(ours, ref, rel=1e-4, cos=0.99999):
    ours, ref = np.asarray(ours), np.asarray(ref)
    assert ours.shape == ref.shape
    err = float(np.abs(ours - ref).max())
    scale = float(np.abs(ref).max())
    assert err <= rel * scale, f"max abs error {err:.3g} over scale {scale:.3g}"
    assert cosine(ours, ref) >= cos


def test_preprocessor_config_is_the_published_one():
    a = SeamlessArgs.from_folder(TINY)
    assert (a.num_mel_bins, a.stride, a.sampling_rate, a.padding_value) == (80, 2, 16000, 1.0)


@pytest.mark.parametrize("case", CASES)
def test_features_match_extractor(golden, case):
    feats, mask = seamless_inputs(golden["wav" + case], SeamlessArgs.from_folder(TINY))
    close(feats, golden["input_features" + case])
    np.testing.assert_array_equal(mask, golden["attention_mask" + case].astype(bool))
    np.testing.assert_array_equal(seamless_features(golden["wav" + case]), feats)


def test_odd_frame_count_pads_with_padding_value(golden):
    feats, mask = seamless_inputs(golden["wav"])
    assert not mask[-1] and mask[:-1].all()
    np.testing.assert_array_equal(feats[-1, 80:], 1.0)
    zero_pad, _ = seamless_inputs(golden["wav"], SeamlessArgs(padding_value=0.0))
    np.testing.assert_array_equal(zero_pad[-1, 80:], 0.0)
    np.testing.assert_array_equal(zero_pad[:-1], feats[:-1])


def test_too_short_audio_is_one_clear_error():
    with pytest.raises(AudioInputError, match="too short"):
        seamless_inputs(np.zeros(500, np.float32))


def test_config_reads_the_published_fields(model):
    a = model.args
    assert (a.hidden_size, a.num_hidden_layers, a.num_attention_heads, a.intermediate_size) == (32, 4, 2, 64)
    assert (a.position_embeddings_type, a.left_max_position_embeddings, a.right_max_position_embeddings,
            a.conv_depthwise_kernel_size) == ("relative_key", 16, 4, 5)
    assert "masked_spec_embed" in model


@pytest.mark.parametrize("case", CASES)
def test_every_hidden_state(model, golden, case):
    feats = mx.array(golden["input_features" + case])
    mask = mx.array(golden["attention_mask" + case])
    ref = golden["hidden_states" + case]
    states = model.hidden_states(feats, mask=mask)
    assert len(states) == ref.shape[0] == 5
    for k, h in enumerate(states):
        close(np.array(h), ref[k])
        # __call__ runs only k layers and returns the same state; batched input too
        np.testing.assert_allclose(np.array(model(feats, k, mask)), np.array(h), atol=1e-6)
    batched = model(feats[None], 4, mask[None])
    np.testing.assert_allclose(np.array(batched[0]), np.array(states[-1]), atol=1e-6)
    if not case:
        close(np.array(states[-1]), golden["last_hidden_state"])


def test_mask_changes_the_result(model, golden):
    """Without the mask the padded last row is attended to and leaks into every frame: the golden
    is then missed, so the comparison above does test the masking."""
    unmasked = np.array(model(mx.array(golden["input_features"]), 4))
    ref = golden["hidden_states"][4]
    assert np.abs(unmasked[:-1] - ref[:-1]).max() > 1e-3


def test_shortened_stack(golden):
    m = load_w2vbert(TINY, layers=2)
    assert m.num_layers == 2 and len(m.encoder.layers) == 2
    feats, mask = mx.array(golden["input_features"]), mx.array(golden["attention_mask"])
    close(np.array(m(feats, 2, mask)), golden["hidden_states"][2])
    close(np.array(m(feats, mask=mask)), golden["hidden_states"][2])
    with pytest.raises(ValueError, match="hidden state 3"):
        m(feats, 3, mask)


def test_audio_to_normalised_features(model, golden):
    """IndexTTS2's ``get_emb``: extractor -> model -> ``(h - mean) / sqrt(var)``."""
    mean, std = read_stats(FIX / "wav2vec2bert_stats.pt")
    assert mean.shape == std.shape == (32,)
    out = semantic_features(model, golden["wav"], int(golden["norm_layer"]), mean, std)
    close(np.array(out), golden["normalised"])


# ----------------------------------------------------------------------------- strict loading

def _copy_with(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "w2v"
    folder.mkdir()
    shutil.copy(TINY / "config.json", folder / "config.json")
    weights = dict(read_safetensors(TINY / "model.safetensors"))
    edit(weights)
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    return folder


@pytest.mark.parametrize("layers", [None, 2])
def test_unknown_tensor_is_named(tmp_path, layers):
    def add(w):
        w["encoder.layers.3.self_attn.linear_pos.weight"] = mx.zeros((32, 32))

    folder = _copy_with(tmp_path, add)
    with pytest.raises(CheckpointError, match=r"unexpected 1: encoder\.layers\.3\.self_attn\.linear_pos\.weight"):
        load_w2vbert(folder, layers=layers)


@pytest.mark.parametrize("layers", [None, 2])
def test_missing_and_misshaped_tensors_of_skipped_layers_are_named(tmp_path, layers):
    def edit(w):
        del w["encoder.layers.3.ffn2.output_dense.bias"]
        w["encoder.layers.3.conv_module.depthwise_conv.weight"] = mx.zeros((32, 1, 7))

    folder = _copy_with(tmp_path, edit)
    with pytest.raises(CheckpointError) as e:
        load_w2vbert(folder, layers=layers)
    msg = str(e.value)
    assert "missing 1: encoder.layers.3.ffn2.output_dense.bias" in msg
    assert "mis-shaped 1: encoder.layers.3.conv_module.depthwise_conv.weight [32, 1, 7]" in msg


def test_unsupported_options_are_refused(tmp_path):
    folder = _copy_with(tmp_path, lambda w: None)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "position_embeddings_type": "rotary"}))
    with pytest.raises(CheckpointError, match="position_embeddings_type 'rotary'"):
        load_w2vbert(folder)


def test_random_weights_at_real_size():
    m = random_w2vbert(layers=1)
    assert isinstance(m, Wav2Vec2BertModel) and m.args == W2VBertArgs()
    w = m.encoder.layers[0]
    assert w.self_attn.distance_embedding.weight.shape == (73, 64)
    assert w.conv_module.depthwise_conv.weight.shape == (1024, 1, 31)
    out = m(mx.array(np.random.default_rng(0).standard_normal((40, 160)).astype(np.float32)), 1)
    assert out.shape == (40, 1024) and bool(mx.all(mx.isfinite(out)))
