"""IndexTTS2's speaker and emotion conditioners (Conformer + perceiver) against upstream goldens
(scripts/goldens/indextts2_upstream.py: ``get_conditioning``, ``get_emovec``, ``merge_emovec`` of
upstream's ``UnifiedVoice`` on the tiny gpt.pth)."""
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
yaml = pytest.importorskip("yaml")

from mlx.utils import tree_flatten

from ttscli.errors import CheckpointError
from ttscli.models.indextts2.conditioning import (
    CONDITIONER_PREFIXES,
    ConditionArgs,
    Conditioners,
    load_conditioners,
    random_conditioners,
)
from ttscli.nn.conformer import sinusoid_table
from ttscli.torchfile import state_dict

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "indextts2"
G = np.load(FIX / "goldens.npz")


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def close(got, want) -> float:
    """Cosine >= 0.99999 and max abs error <= 1e-4 of the golden's scale; returns the error."""
    got = np.asarray(got, np.float64).reshape(want.shape)
    err = float(np.abs(got - want).max())
    assert cosine(got, want) >= 0.99999
    assert err <= 1e-4 * float(np.abs(want).max()), err
    return err


@pytest.fixture(scope="module")
def sizes():
    g = yaml.safe_load((FIX / "tiny" / "config.yaml").read_text())["gpt"]
    return (ConditionArgs.from_dict(g["condition_module"], source="config.yaml", where="gpt.condition_module."),
            ConditionArgs.from_dict(g["emo_condition_module"], source="config.yaml", where="gpt.emo_condition_module."),
            g["model_dim"], g["feature_width"])


@pytest.fixture(scope="module")
def weights():
    return state_dict(FIX / "tiny" / "gpt.pth")


@pytest.fixture(scope="module")
def cond(weights, sizes):
    return load_conditioners(weights, *sizes, source="gpt.pth")


def feat(name):
    return mx.array(G[name])[None]


def test_speaker_latents(cond):
    out = cond.conditioning(feat("spk_feat"))
    assert out.shape == (1, 32, G["cond_latents"].shape[1])
    close(out[0], G["cond_latents"])


def test_emotion_vectors(cond):
    close(cond.emovec(feat("spk_feat"))[0], G["emovec_spk"])
    close(cond.emovec(feat("emo_feat"))[0], G["emovec_emo"])
    # the two references' vectors differ well beyond the tolerance: the comparison can fail
    assert np.abs(G["emovec_spk"] - G["emovec_emo"]).max() > 0.1


def test_merge_emovec(cond):
    alpha = float(G["emo_alpha"])
    close(cond.merge_emovec(feat("spk_feat"), feat("emo_feat"), alpha)[0], G["emovec"])
    one = cond.merge_emovec(feat("spk_feat"), feat("emo_feat"), 1.0)
    np.testing.assert_allclose(np.array(one[0]), G["emovec_emo"], atol=1e-5)


def test_batch_rows_are_independent(cond):
    """Two references of one length in one batch give each one's own result."""
    spk, emo = G["spk_feat"][:30], G["emo_feat"]
    both = mx.array(np.stack([spk, emo]))
    lat, vec = cond.conditioning(both), cond.emovec(both)
    for i, x in enumerate((spk, emo)):
        np.testing.assert_allclose(np.array(lat[i]), np.array(cond.conditioning(mx.array(x)[None])[0]), atol=1e-5)
        np.testing.assert_allclose(np.array(vec[i]), np.array(cond.emovec(mx.array(x)[None])[0]), atol=1e-5)


def test_saved_position_table_is_the_sinusoid(weights):
    for p in ("conditioning_encoder", "emo_conditioning_encoder"):
        pe = weights[f"{p}.embed.pos_enc.pe"]
        np.testing.assert_allclose(pe[0], sinusoid_table(*pe.shape[1:]), atol=1e-4)


def test_strict_over_its_prefixes(weights, sizes):
    mine = {k: v for k, v in weights.items() if k.startswith(CONDITIONER_PREFIXES)}
    others = set(weights) - set(mine)
    assert others and all(k.startswith(("gpt.", "text_", "mel_", "speed_emb", "final_norm")) for k in others)
    load_conditioners(mine, *sizes)                   # the LM's tensors are not needed ...

    def fails(w, *words):
        with pytest.raises(CheckpointError) as e:
            load_conditioners(w, *sizes, source="gpt.pth")
        for word in ("gpt.pth", *words):
            assert word in str(e.value)

    key = "emo_conditioning_encoder.encoders.0.conv_module.depthwise_conv.weight"
    fails({k: v for k, v in weights.items() if k != key}, "missing", key)
    fails({**weights, "perceiver_encoder.extra": np.zeros(3, np.float32)}, "unexpected", "perceiver_encoder.extra")
    fails({**weights, "emovec_layer.weight": np.zeros((3, 3), np.float32)}, "mis-shaped", "emovec_layer.weight")
    bad = ConditionArgs(**{**vars(sizes[0]), "input_layer": "conv2d"})
    with pytest.raises(CheckpointError, match="input_layer"):
        Conditioners(bad, *sizes[1:])


def test_random_conditioners_take_the_tiny_layout(weights, sizes):
    m = random_conditioners(*sizes)
    got = {k: v.shape for k, v in tree_flatten(m.parameters())}
    assert got == {k: tuple(v.shape) for k, v in weights.items() if k.startswith(CONDITIONER_PREFIXES)}
    pe = np.array(m.conditioning_encoder.embed.pos_enc.pe)
    np.testing.assert_array_equal(pe[0], sinusoid_table(*pe.shape[1:]))
    out = np.array(m.emovec(feat("spk_feat")))
    assert np.all(np.isfinite(out)) and np.abs(out).max() > 0


def test_published_shapes():
    """The module at the published size has the spec's tensors (docs/models/indextts2.md)."""
    shapes = {k: v.shape for k, v in tree_flatten(Conditioners().parameters())}
    expect = {
        "conditioning_encoder.embed.conv.0.weight": (512, 1, 3, 3),
        "conditioning_encoder.embed.out.0.weight": (512, 261632),
        "conditioning_encoder.embed.pos_enc.pe": (1, 5000, 512),
        "conditioning_encoder.encoders.5.self_attn.pos_bias_u": (8, 64),
        "conditioning_encoder.encoders.5.feed_forward.w_1.weight": (2048, 512),
        "conditioning_encoder.encoders.0.conv_module.pointwise_conv1.weight": (1024, 512, 1),
        "conditioning_encoder.encoders.0.conv_module.depthwise_conv.weight": (512, 1, 15),
        "perceiver_encoder.latents": (32, 1280),
        "perceiver_encoder.proj_context.weight": (1280, 512),
        "perceiver_encoder.layers.1.0.to_kv.weight": (1024, 1280),
        "perceiver_encoder.layers.1.1.0.weight": (3412, 1280),
        "perceiver_encoder.layers.1.1.2.weight": (1280, 1706),
        "perceiver_encoder.norm.gamma": (1280,),
        "emo_conditioning_encoder.encoders.3.self_attn.pos_bias_v": (4, 128),
        "emo_conditioning_encoder.encoders.3.feed_forward.w_2.weight": (512, 1024),
        "emo_perceiver_encoder.latents": (1, 1024),
        "emo_perceiver_encoder.layers.0.0.to_q.weight": (256, 1024),
        "emo_perceiver_encoder.layers.0.1.0.weight": (2730, 1024),
        "emo_perceiver_encoder.layers.0.1.2.weight": (1024, 1365),
        "emovec_layer.weight": (1280, 1024),
        "emo_layer.weight": (1280, 1280),
    }
    assert {k: shapes.get(k) for k in expect} == expect
    assert "emo_conditioning_encoder.encoders.4.norm_ff.weight" not in shapes
    assert "conditioning_encoder.encoders.6.norm_ff.weight" not in shapes
