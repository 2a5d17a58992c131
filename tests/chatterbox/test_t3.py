"""Chatterbox T3 against goldens of the upstream code (scripts/goldens/chatterbox_t3.py) on a
tiny checkpoint in the published layout (tests/fixtures/chatterbox/tiny)."""
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

from ttscli.errors import GenerationError
from ttscli.lm.sample import SamplingParams
from ttscli.models.chatterbox.load import load_conds, load_t3, load_tokenizer
from ttscli.models.chatterbox.t3 import T3Sampling, process_logits
from ttscli.models.chatterbox.tokenizer import punc_norm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "chatterbox"
TINY = FIX / "tiny"
G = np.load(FIX / "t3_goldens.npz")
META = json.loads((FIX / "t3_goldens.json").read_text())


@pytest.fixture(scope="module")
def t3():
    return load_t3(TINY)


@pytest.fixture(scope="module")
def ids():
    return load_tokenizer(TINY).encode(punc_norm(META["text"]))


@pytest.fixture(scope="module")
def conds():
    return load_conds(TINY)


def test_text_front_end(ids):
    assert ids == G["text_ids"].tolist()
    # spaces are collapsed before "..." becomes ", ", as upstream does it (hence two spaces)
    assert punc_norm("hello...  world: yes") == "Hello,  world, yes."
    assert punc_norm("") == "You need to add some text for me to talk."
    assert punc_norm("Ok \u201cquoted\u201d!") == 'Ok "quoted"!'


def test_llama3_rope_frequencies_match_transformers(t3):
    from ttscli.lm.rope import inv_freq

    got = inv_freq(t3.args.rope, t3.args.head_dim)
    ref = G["rope_inv_freq"]      # transformers' LlamaRotaryEmbedding for T3's config, float32
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    # the band rescaling matters: unscaled frequencies differ by up to the factor 8
    plain = 1.0 / 500000.0 ** (np.arange(0, 64, 2) / 64)
    assert (plain / ref).max() > 7.9


@pytest.mark.parametrize("exag", [5, 7])
def test_cfg_prefill(t3, ids, conds, exag):
    cond = conds.t3_cond(exag / 10)
    np.testing.assert_allclose(np.array(t3.conditioning(cond))[0], G[f"cond_emb_exag{exag}"], atol=1e-5)
    embeds = t3.prefill_embeds(cond, ids, cfg=True)
    # [cond 34 | [START] text [STOP] | BOS | BOS], two rows
    assert embeds.shape == (2, 34 + len(ids) + 2 + 2, t3.args.hidden_size)
    np.testing.assert_allclose(np.array(embeds), G[f"prefill_embeds_exag{exag}"], atol=1e-5)
    logits, _ = t3(embeds, t3.new_cache())
    got, ref = np.array(logits), G[f"prefill_logits_exag{exag}"]
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.99999, cos
    assert not np.allclose(ref[0], ref[1], atol=1e-3)     # the unconditional row differs


@pytest.mark.parametrize("rp", [10, 12])
def test_greedy_tokens(t3, ids, conds, rp):
    s = T3Sampling(temperature=1e-6, min_p=META["min_p"], top_p=META["top_p"], repetition_penalty=rp / 10,
                   cfg_weight=META["cfg_weight"], max_new_tokens=20)
    got = list(itertools.islice(t3.generate(conds.t3_cond(0.5), ids, s), 20))
    ref = G[f"greedy_rp{rp}"].tolist()
    assert sum(a == b for a, b in zip(got, ref)) == 20, (got, ref)


def test_penalty_goldens_differ():
    assert G["greedy_rp10"].tolist() != G["greedy_rp12"].tolist()


def test_processors_in_reference_order():
    seen = np.zeros((1, G["proc_logits"].shape[1]), bool)
    seen[0, G["proc_seen"]] = True
    for (rp, temp, min_p, top_p), logits, ref in zip(G["proc_settings"], G["proc_logits"], G["proc_logprobs"]):
        p = SamplingParams(temperature=temp, min_p=min_p, top_p=top_p, repetition_penalty=rp)
        x = process_logits(mx.array(logits[None]), p, mx.array(seen))
        x = np.array(x - mx.logsumexp(x, axis=-1, keepdims=True))[0]
        kept = np.isfinite(ref)
        assert np.array_equal(np.isfinite(x), kept)
        np.testing.assert_allclose(x[kept], ref[kept], atol=1e-5)


def test_limit_is_an_error_not_a_cut(t3, ids, conds):
    s = T3Sampling(temperature=1e-6, cfg_weight=0.5, max_new_tokens=5)
    gen = t3.generate(conds.t3_cond(0.5), ids, s)
    got = list(itertools.islice(gen, 5))
    assert got == G["greedy_rp12"][:5].tolist()
    with pytest.raises(GenerationError, match="limit of 5 speech tokens"):
        next(gen)


def test_stop_token_ends_generation(t3, ids, conds):
    # make the stop token the argmax after three tokens: a bias on the head's stop row
    from ttscli.models.chatterbox.t3 import T3

    stop = t3.args.stop_speech_token
    model = T3(t3.args)
    model.update(t3.parameters())
    calls = {"n": 0}
    orig = model.speech_head

    class Head:
        def __call__(self, h):
            calls["n"] += 1
            out = orig(h)
            if calls["n"] == 4:   # prefill + 3 steps
                out = out + 1e4 * (mx.arange(out.shape[-1]) == stop)
            return out

    object.__setattr__(model, "speech_head", Head())
    s = T3Sampling(temperature=1e-6, cfg_weight=0.5, max_new_tokens=20)
    assert list(model.generate(conds.t3_cond(0.5), ids, s)) == G["greedy_rp12"][:3].tolist()


def test_sampling_is_seeded_and_valid(t3, ids, conds):
    from ttscli.lm.sample import KeyStream

    s = T3Sampling(max_new_tokens=12)
    a = list(itertools.islice(t3.generate(conds.t3_cond(0.5), ids, s, keys=KeyStream(3)), 12))
    b = list(itertools.islice(t3.generate(conds.t3_cond(0.5), ids, s, keys=KeyStream(3)), 12))
    assert a == b and all(0 <= t < t3.args.speech_vocab for t in a)


def test_no_cfg_is_one_row(t3, ids, conds):
    e = t3.prefill_embeds(conds.t3_cond(0.5), ids, cfg=False)
    assert e.shape[0] == 1
    s = T3Sampling(temperature=1e-6, cfg_weight=0.0, max_new_tokens=4)
    assert len(list(itertools.islice(t3.generate(conds.t3_cond(0.5), ids, s), 4))) == 4


@pytest.mark.parametrize("bits", [8, 4])
def test_convert_quantized_t3(tmp_path, ids, conds, bits):
    from ttscli.models.chatterbox.convert import convert_mlx

    out = tmp_path / "q"
    convert_mlx(None, TINY, out, quantize=True, q_bits=bits, q_group_size=64)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in TINY.iterdir())
    q = load_t3(out)
    from mlx import nn

    assert isinstance(q.tfmr.layers[0].mlp.down_proj, nn.QuantizedLinear)
    assert not isinstance(q.speech_head, nn.QuantizedLinear) and not isinstance(q.text_emb, nn.QuantizedEmbedding)
    logits, _ = q(q.prefill_embeds(conds.t3_cond(0.5), ids, cfg=True), q.new_cache())
    got, ref = np.array(logits), G["prefill_logits_exag5"]
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= (0.999 if bits == 8 else 0.98), cos


def test_packed_t3_without_marker_is_refused(tmp_path):
    import shutil

    from safetensors.numpy import load_file, save_file

    from ttscli.errors import CheckpointError
    from ttscli.models.chatterbox.convert import convert_mlx

    out = tmp_path / "q"
    convert_mlx(None, TINY, out, quantize=True, q_bits=8, q_group_size=64)
    w = load_file(str(out / "t3_cfg.safetensors"))
    save_file(w, str(out / "t3_cfg.safetensors"))          # the marker gone
    shutil.copy2(TINY / "ve.safetensors", out / "ve.safetensors")
    with pytest.raises(CheckpointError, match="quantized .* but config.json has no"):
        load_t3(out)
