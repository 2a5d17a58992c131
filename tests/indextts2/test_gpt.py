"""IndexTTS2's text-to-semantic GPT against upstream goldens (scripts/goldens/indextts2_upstream.py
for goldens.npz, scripts/goldens/indextts2_beams.py for beams.npz) on the tiny gpt.pth."""

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
yaml = pytest.importorskip("yaml")

from gptcheck import STOP, B, G, cosine, prompt, run, tiny_args, tiny_weights

from ttscli.errors import CheckpointError, GenerationError
from ttscli.lm.gpt2 import select_rows
from ttscli.lm.sample import SamplingParams
from ttscli.models.indextts2.conditioning import CONDITIONER_PREFIXES as CONDITIONERS
from ttscli.models.indextts2.gpt import CodeLimitReached, GPTArgs, SemanticGPT, load_gpt, random_gpt


@pytest.fixture(scope="module")
def args():
    return tiny_args()


@pytest.fixture(scope="module")
def weights():
    return tiny_weights()


@pytest.fixture(scope="module")
def gpt(args, weights):
    return load_gpt(weights, args, CONDITIONERS)


@pytest.fixture(scope="module")
def embeds(gpt):
    return prompt(gpt)


def test_args(args):
    assert (args.model_dim, args.layers, args.heads) == (32, 2, 2)
    assert (args.start_mel_token, args.stop_mel_token, args.number_mel_codes) == (64, STOP, 66)
    assert (args.text_positions, args.mel_positions, args.cond_rows) == (42, 123, 34)


def test_prompt(embeds):
    ref = G["prompt_embeds"]
    assert embeds.shape == (1, *ref.shape) == (1, 32 + 2 + 12 + 2, 32)
    assert np.abs(np.array(embeds[0]) - ref).max() <= 1e-6 * np.abs(ref).max()


def test_prompt_drops_text_specials(gpt, embeds):
    # start / stop text ids inside the text are dropped, as prepare_gpt_inputs does
    text = np.concatenate([[0], G["text"][:5], [1], G["text"][5:]])
    again = gpt.prompt(mx.array(G["cond_latents"])[None], mx.array(G["emovec"])[None], text[None])
    assert np.array_equal(np.array(again), np.array(embeds))


def test_prefill(gpt, embeds):
    logits, hidden = gpt.prefill(embeds, gpt.make_cache(), return_hidden=True)
    assert logits.shape == (1, 66) and hidden.shape == (1, 32)
    h, lg = np.array(hidden[0]), np.array(logits[0])
    assert cosine(h, G["prefill_hidden"]) >= 0.99999
    assert cosine(lg, G["prefill_logits"]) >= 0.99999
    assert np.abs(h - G["prefill_hidden"]).max() <= 1e-5 * np.abs(G["prefill_hidden"]).max()
    assert np.abs(lg - G["prefill_logits"]).max() <= 1e-5 * np.abs(G["prefill_logits"]).max()


@pytest.mark.parametrize("name,penalty", [("greedy", 1.0), ("greedy_rep", 10.0)])
def test_greedy_codes(gpt, embeds, name, penalty):
    p = SamplingParams(do_sample=False, repetition_penalty=penalty)
    codes, limit = run(gpt, embeds, p, max_tokens=20, min_tokens=20)
    assert codes == G[name].tolist()
    assert not limit            # a forced length ends at its length


def test_penalty_matters(gpt, embeds):
    # the goldens differ with and without the penalty, and the fake prompt id 1 is penalised too
    assert G["greedy"].tolist() != G["greedy_rep"].tolist()
    assert 1 not in G["greedy_rep"].tolist()


@pytest.mark.parametrize("name", ["beam_free", "beam_forced", "beam_norep", "beam_lp2", "beam_short", "greedy_free"])
def test_upstream_search(gpt, embeds, name):
    ref = B[name].tolist()
    lo, hi = int(B[name + "_min"]), int(B[name + "_max"])
    p = SamplingParams(do_sample=False, repetition_penalty=1.0 if name == "beam_norep" else 10.0)
    codes, limit = run(gpt, embeds, p, max_tokens=hi, min_tokens=lo, num_beams=1 if name == "greedy_free" else 3,
                       length_penalty=2.0 if name == "beam_lp2" else 0.0)
    stopped = ref[-1] == STOP
    assert codes == (ref[:-1] if stopped else ref)
    # a limit reached is reported, unless the length was forced
    assert limit == (not stopped and lo < hi)


def test_beams_differ_from_greedy():
    # what the beam goldens test is not greedy search under another name
    assert B["beam_free"].tolist() != B["greedy_free"].tolist()
    assert B["beam_forced"].tolist()[:20] != G["greedy_rep"].tolist()


def test_limit_is_reported(gpt, embeds):
    p = SamplingParams(do_sample=False, repetition_penalty=10.0)
    with pytest.raises(CodeLimitReached, match="limit of 5 codes") as e:
        list(gpt.generate(embeds, p, max_tokens=5))
    assert e.value.codes == B["greedy_free"].tolist()[:5]
    with pytest.raises(GenerationError, match="code positions"):
        list(gpt.generate(embeds, p, max_tokens=123))


def test_latent(gpt, embeds):
    lat = gpt.latent(embeds, G["text"], G["greedy"])
    ref = G["gpt_latent"]
    assert lat.shape == (1, *ref.shape) == (1, 20, 32)
    assert cosine(np.array(lat[0]), ref) >= 0.99999
    assert np.abs(np.array(lat[0]) - ref).max() <= 1e-5 * np.abs(ref).max()


def test_step_positions(gpt, embeds):
    # decoding puts code i at code position i + 2; the latent pass (training layout) at i + 1, so
    # the decode logits match the latent's states only through the start position
    cache = gpt.make_cache()
    _, h0 = gpt.prefill(embeds, cache, return_hidden=True)
    _, h1 = gpt.step(mx.array(G["greedy"][:1]), 0, cache, return_hidden=True)
    lat = np.array(gpt.latent(embeds, G["text"], G["greedy"])[0])
    assert np.abs(np.array(h0[0]) - lat[0]).max() < 1e-5
    assert np.abs(np.array(h1[0]) - lat[1]).max() > 1e-3


@pytest.mark.parametrize("name,beams", [("sample_beam", 3), ("sample_one", 1)])
def test_upstream_sampling_replayed(gpt, embeds, monkeypatch, name, beams):
    """infer_generator's sampling (temperature 0.8, top-k 30, top-p 0.8, penalty 10; 3 beams or
    one row) draw for draw: upstream ran with its multinomial replaced by the Gumbel-top-k draw of
    recorded noise, and the same noise is replayed here."""
    import ttscli.models.indextts2.gpt as module

    noise = iter(B[name + "_noise"])
    monkeypatch.setattr(module, "gumbel", lambda shape, key: mx.array(next(noise)).reshape(shape))
    p = SamplingParams(temperature=0.8, top_k=30, top_p=0.8, repetition_penalty=10.0, do_sample=True)
    codes, limit = run(gpt, embeds, p, max_tokens=30, num_beams=beams)
    ref = B[name].tolist()
    stopped = ref[-1] == STOP
    assert codes == (ref[:-1] if stopped else ref)
    assert limit == (not stopped)
    assert next(noise, None) is None          # as many draws as upstream made


@pytest.mark.parametrize("beams", [1, 3])
def test_sampling_is_seeded(gpt, embeds, beams):
    p = SamplingParams(temperature=0.8, top_k=30, top_p=0.8, repetition_penalty=10.0, do_sample=True)
    kw = dict(max_tokens=30, num_beams=beams)
    a = run(gpt, embeds, p, key=mx.random.key(3), **kw)
    b = run(gpt, embeds, p, key=mx.random.key(3), **kw)
    others = [run(gpt, embeds, p, key=mx.random.key(s), **kw) for s in (4, 5, 6)]
    assert a == b
    assert any(o != a for o in others)
    for codes, limit in (a, *others):
        assert all(0 <= c < 64 for c in codes)            # neither the start nor the stop code
        assert len(codes) <= 30 and limit == (len(codes) == 30)


def test_beam_filters_keep_two():
    # HF's beam sampling keeps at least two ids per beam through top-k and top-p (the stop and
    # one other); a single row's sampling keeps one
    from ttscli.lm.sample import filter_logits
    from ttscli.models.indextts2.gpt import _beam_filter

    x = mx.array([[8.0, 0.0, -1.0, -2.0, -3.0], [0.0, 9.0, 1.0, -1.0, 0.5]])
    for p in (SamplingParams(top_p=0.01), SamplingParams(top_k=1)):
        assert mx.isfinite(_beam_filter(x, p)).sum(axis=-1).tolist() == [2, 2]
        assert mx.isfinite(filter_logits(x, p)).sum(axis=-1).tolist() == [1, 1]


def test_beam_sampling_min_tokens(gpt, embeds):
    p = SamplingParams(temperature=0.8, top_k=30, top_p=0.8, repetition_penalty=10.0, do_sample=True)
    codes, limit = run(gpt, embeds, p, key=mx.random.key(0), max_tokens=12, min_tokens=12, num_beams=3)
    assert len(codes) == 12 and not limit


def test_select_rows(gpt, embeds):
    cache = gpt.make_cache()
    gpt.prefill(mx.concatenate([embeds, embeds * 0.5]), cache)
    k0, k1 = (np.array(cache[0].keys[i]) for i in (0, 1))
    select_rows(cache, [1, 1, 0])
    got = np.array(cache[0].keys)
    assert got.shape[0] == 3
    assert np.array_equal(got[0], k1) and np.array_equal(got[1], k1) and np.array_equal(got[2], k0)


def test_compiled_decoder_step(gpt, embeds):
    # the stack runs under ttscli.lm's compiled decode step (fixed-capacity slots, masked)
    from ttscli.lm.decoder import MLXCodeDecoder

    dec = MLXCodeDecoder(gpt, compiled=True)
    dec.step_kernel = False
    plain, slots = gpt.make_cache(), gpt.make_cache()
    x = mx.concatenate([embeds, gpt.start_embedding()], axis=1)
    gpt(x, plain)
    dec.prefill(x, slots)
    for i, code in enumerate(G["greedy"][:4].tolist()):
        e = gpt.code_embedding(mx.array([code]), i)
        want, got = gpt(e, plain)[0], dec.step(e, slots)[0]
        assert np.abs(np.array(got) - np.array(want)).max() < 1e-5


def test_strict_loading(args, weights):
    # the conditioners' tensors are another module's: left to it by prefix, else unexpected
    with pytest.raises(CheckpointError, match=r"unexpected \d+: conditioning_encoder\."):
        load_gpt(weights, args)
    extra = dict(weights, **{"gpt.h.0.attn.extra": np.zeros(3, np.float32)})
    with pytest.raises(CheckpointError, match=r"gpt\.h\.0\.attn\.extra"):
        load_gpt(extra, args, CONDITIONERS)
    missing = {k: v for k, v in weights.items() if k != "mel_head.bias"}
    with pytest.raises(CheckpointError, match="mel_head.bias"):
        load_gpt(missing, args, CONDITIONERS)
    bad = dict(weights, **{"speed_emb.weight": np.zeros((3, 32), np.float32)})
    with pytest.raises(CheckpointError, match="speed_emb.weight"):
        load_gpt(bad, args, CONDITIONERS)
    # post_init_gpt2_config's alias of mel_embedding (a file saved after it holds one) is ignored
    alias = dict(weights, **{"gpt.wte.weight": weights["mel_embedding.weight"]})
    assert isinstance(load_gpt(alias, args, CONDITIONERS), SemanticGPT)


def test_text_limit(gpt):
    long = np.arange(2, 2 + 41)[None]
    with pytest.raises(GenerationError, match="at most 40"):
        gpt.prompt(mx.zeros((1, 32, 32)), mx.zeros((1, 32)), long)


def test_random_gpt(args):
    m = random_gpt(args, seed=1)
    assert m.gpt.h[1].attn.c_attn.weight.shape == (32, 96)
    emb = m.prompt(mx.zeros((1, 32, 32)), mx.zeros((1, 32)), G["text"])
    logits = m.prefill(emb, m.make_cache())
    assert logits.shape == (1, 66) and bool(mx.all(mx.isfinite(logits)))
    pub = GPTArgs.published()
    assert (pub.text_vocab, pub.text_positions, pub.mel_positions) == (12001, 602, 1818)
