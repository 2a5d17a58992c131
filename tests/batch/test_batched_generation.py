"""Batched Qwen3-TTS frames (ttscli.lm.batch + qwen3_tts/batched.py): every row's codes equal the
same request run alone with the same seed, while rows of different prompt lengths, sampling
settings and stops leave the batch and others join it."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import GenerationError
from ttscli.lm import KVCache, MLXCodeDecoder, SamplingParams
from ttscli.lm.batch import BatchKVCache, RowBatch, merge, select
from ttscli.models.qwen3_tts.batched import Item, generate_batched
from ttscli.models.qwen3_tts.load import load_model, load_tokenizer
from ttscli.models.qwen3_tts.loop import LoopConfig, generate_frames
from ttscli.models.qwen3_tts.prompt import prepare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "qwen3_e2e"))
from e2e_fixture import build

TEXTS = ["Hi.", "A somewhat longer sentence for the second row.", "Third one, medium length.",
         "The fourth row joins late.", "Five."]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # the e2e checkpoint: its EOS row is scaled so that sampling stops within a few dozen frames
    ckpt = build("customvoice", tmp_path_factory.mktemp("batched") / "cv", eos_gain=3.0)
    m, gen = load_model(ckpt)
    return m, gen, load_tokenizer(ckpt)


def alone(m, item):
    try:
        return list(generate_frames(m.talker, MLXCodeDecoder(m.talker), item.prompt, item.cfg, seed=item.seed)), None
    except GenerationError as e:
        return None, str(e)


def items(m, gen, tok):
    out = []
    for i, text in enumerate(TEXTS):
        p = prepare(m.talker, m.args, tok, text, speaker="ryan" if i % 2 else "serena")
        cfg = LoopConfig.from_generation_config(gen, {}, max_frames=40)
        if i == 1:
            cfg = LoopConfig.from_generation_config(gen, {"temperature": 0.7, "top_k": 20,
                                                          "subtalker_temperature": 0.5}, max_frames=40)
        if i == 2:
            cfg = LoopConfig.from_generation_config(gen, {"do_sample": False, "subtalker_do_sample": False},
                                                    max_frames=40)
        if i == 3:  # runs to its limit without stopping: leaves by ignore_eos
            cfg = replace(cfg, ignore_eos=True, max_frames=13)
        if i == 4:  # too few frames allowed: an overrun error for this row only
            cfg = replace(cfg, max_frames=2)
        out.append(Item(key=i, prompt=p, cfg=cfg, seed=100 + i))
    return out


def run_batched(m, its, join_late: dict[int, int], max_batch: int):
    """Rows in ``join_late`` (key -> step) are offered only from that step on."""
    queue = [it for it in its if it.key not in join_late]
    late = {it.key: it for it in its if it.key in join_late}
    step = {"n": 0}

    def source(n):
        step["n"] += 1
        for k, s in join_late.items():
            if step["n"] >= s and k in late:
                queue.insert(0, late.pop(k))
        take = queue[:n]
        del queue[:n]
        return take

    got = {it.key: [] for it in its}
    errors = {}
    ended = set()
    stats = {}
    for key, x in generate_batched(m.talker, source, max_batch=max_batch, stats=stats):
        assert key not in ended
        if x is None:
            ended.add(key)
        elif isinstance(x, Exception):
            errors[key] = str(x)
            ended.add(key)
        else:
            got[key].append(x)
    return got, errors, ended, stats


@pytest.mark.parametrize("max_batch,join_late", [(8, {3: 4}), (2, {})])
def test_rows_equal_alone(model, max_batch, join_late):
    m, gen, tok = model
    its = items(m, gen, tok)
    got, errors, ended, stats = run_batched(m, its, join_late, max_batch)
    assert ended == {it.key for it in its}
    assert 1 < max(stats["rows_per_step"]) <= max_batch
    for it in its:
        frames, err = alone(m, it)
        if err is not None:
            assert errors.get(it.key) == err, it.key
            continue
        assert it.key not in errors, errors
        assert len(got[it.key]) == len(frames), (it.key, len(got[it.key]), len(frames))
        for a, b in zip(got[it.key], frames):
            np.testing.assert_array_equal(a, b)
    # rows had different lengths: some left while others went on
    assert len(set(map(len, got.values()))) > 1


def test_cache_merge_and_select_keep_each_rows_attention():
    """Left-padded rows in one batch cache attend exactly as their own caches do."""
    from ttscli.lm import DecoderLM, LMArgs

    mx.random.seed(0)
    a = LMArgs(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6, vocab_size=50, qk_norm=True)
    lm = DecoderLM(a)
    mx.eval(lm.parameters())
    lens = [3, 7, 5]
    xs = [mx.random.normal((1, n, 32)) for n in lens]
    own = []
    for x in xs:
        c = lm.make_cache()
        lm(cache=c, input_embeddings=x)
        own.append(c)
    batch = RowBatch(lm)
    batch.join(own[:2])
    batch.join(own[2:])
    assert batch.caches[0].pad == [4, 0, 2]
    step = mx.random.normal((3, 1, 32))
    h = batch.step(step)
    for i, c in enumerate(own):
        ref = lm(cache=c, input_embeddings=step[i:i + 1])[:, -1]
        assert mx.abs(h[i] - ref[0]).max().item() < 1e-5
    batch.keep([2, 0])
    assert batch.caches[0].pad == [0, 2]  # the slot only row 1 needed is gone
    step2 = mx.random.normal((2, 1, 32))
    h2 = batch.step(step2)
    for j, i in enumerate([2, 0]):
        ref = lm(cache=own[i], input_embeddings=step2[j:j + 1])[:, -1]
        assert mx.abs(h2[j] - ref[0]).max().item() < 1e-5
    assert isinstance(merge([own[0][0]]), BatchKVCache) and isinstance(select(batch.caches[0], [1]), BatchKVCache)
    assert isinstance(own[0][0], KVCache) and SamplingParams().greedy is False


def test_rows_joining_together_with_one_prompt_length_are_prefilled_as_one_batch(model):
    """Same prompt, different seeds and params: one prefill forward for the group, each row
    still equal to its request alone."""
    m, gen, tok = model
    p = prepare(m.talker, m.args, tok, TEXTS[0], speaker="serena")
    cfgs = [LoopConfig.from_generation_config(gen, {}, max_frames=40),
            LoopConfig.from_generation_config(gen, {"temperature": 0.7, "top_k": 20}, max_frames=40),
            replace(LoopConfig.from_generation_config(gen, {}, max_frames=40), ignore_eos=True, max_frames=9)]
    its = [Item(key=i, prompt=p, cfg=cfgs[i % 3], seed=7 + i) for i in range(5)]
    calls = []
    forward = m.talker.__class__.__call__

    def counting(self, embeds, cache=None):
        calls.append(embeds.shape[0])
        return forward(self, embeds, cache)

    m.talker.__class__.__call__ = counting
    try:
        got, errors, ended, _ = run_batched(m, its, {}, max_batch=5)
    finally:
        m.talker.__class__.__call__ = forward
    assert calls == [5]          # one prefill forward for the five rows
    assert ended == {it.key for it in its}
    for it in its:
        frames, err = alone(m, it)
        assert errors.get(it.key) == err
        if err is None:
            assert len(got[it.key]) == len(frames)
            for a, b in zip(got[it.key], frames):
                np.testing.assert_array_equal(a, b)
    assert len({len(v) for v in got.values()}) > 1
