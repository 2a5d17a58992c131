"""Pipeline plumbing: max-frames error, streaming == one-shot, saved voices, clone from audio.

The speech decoder here is the speech_tokenizer package's decoder at tiny random dimensions
(its own numerics are tested against upstream elsewhere); codes come from the tiny talkers.
"""
from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import GenerationError, UsageError
from ttscli.generate import Request, Stats
from ttscli.lm import MLXCodeDecoder
from ttscli.models.qwen3_tts.load import load_model, load_tokenizer
from ttscli.models.qwen3_tts.pipeline import Qwen3TTSPipeline
from ttscli.models.qwen3_tts.prompt import VoicePrompt, ref_text_template
from ttscli.codecs.qwen3_12hz import DecoderArgs, build_random_decoder
from ttscli.models.qwen3_tts.voice import load_voice, save_voice

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "qwen3_tts"
GREEDY = {"do_sample": False, "subtalker_do_sample": False}


class Spec:
    def __init__(self, id):
        self.id, self.sample_rate, self.defaults = id, 24000, {}


def pipeline(name: str, zero_eos: bool = True) -> Qwen3TTSPipeline:
    model, gen = load_model(FIX / name)
    if zero_eos:
        w = model.talker.codec_head.weight
        eos = model.args.talker_config.codec_eos_token_id
        model.talker.codec_head.weight = mx.where(mx.arange(w.shape[0])[:, None] == eos, 0.0, w)
    dec = build_random_decoder("float32", DecoderArgs(
        codebook_size=2048, codebook_dim=16, latent_dim=16, hidden_size=16, intermediate_size=16,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=8, decoder_dim=16))
    return Qwen3TTSPipeline(Spec(name), model, gen, load_tokenizer(FIX / name), dec,
                            MLXCodeDecoder(model.talker), FIX / name)


def run(p, r):
    return list(p.generate(r))


def test_max_frames_is_an_error_not_truncation():
    p = pipeline("tiny-customvoice")
    with pytest.raises(GenerationError, match="max frames"):
        run(p, Request(text="Hello world.", voice="ryan", max_frames=5, knobs=GREEDY))


def test_streaming_equals_one_shot():
    p = pipeline("tiny-customvoice")
    base = dict(text="Hello world.", voice="ryan", instruct="Speak.", language="english", max_frames=9,
                seed=3, ignore_eos=True)
    one = run(p, Request(**base))
    assert len(one) == 1 and one[0].shape == (9 * 1920,) and one[0].dtype == np.float32
    p.stats = Stats()  # pipelines accumulate stats; the engine resets them per synthesis
    chunks = run(p, Request(**base, stream=True, first_chunk_frames=3, chunk_frames=4))
    assert [len(c) for c in chunks] == [3 * 1920, 4 * 1920, 2 * 1920]
    np.testing.assert_allclose(np.concatenate(chunks), one[0], atol=1e-5)
    assert p.stats.first_audio_s is not None and p.stats.frames == 9


def test_saved_icl_voice_reproduces_upstream_greedy_codes(tmp_path):
    p = pipeline("tiny-base")
    cases = json.loads((FIX / "tiny-base.cases.json").read_text())
    case = cases["cases"]["icl"]
    g = np.load(FIX / "tiny-base.goldens.npz")
    voice = VoicePrompt(mx.array(np.array(case["x_vector"], np.float32)),
                        mx.array(np.array(case["ref_code"], np.int32)),
                        case["ref_text"], p.tokenizer.encode(ref_text_template(case["ref_text"])))
    path = save_voice(tmp_path / "v.safetensors", voice, "tiny-base", p.args.tts_model_size)
    r = Request(text=case["text"], voice=str(path), language=case["language"], max_frames=20, knobs=GREEDY)
    codes = []
    frames, _ = p.frames(r)
    with pytest.raises(GenerationError):  # EOS row zeroed: runs into max_frames
        for f in frames:
            codes.append(f)
    np.testing.assert_array_equal(np.stack(codes), g["icl/greedy_codes"])
    with pytest.raises(UsageError, match="same model size"):
        load_voice(path, "1b7", 32)


def test_clone_from_reference_audio_x_vector_only(tmp_path):
    p = pipeline("tiny-base")
    rng = np.random.default_rng(0)
    ref = (0.1 * rng.standard_normal(16000)).astype(np.float32)
    out = tmp_path / "me.safetensors"
    r = Request(text="Hello.", ref_audio=ref, ref_sample_rate=16000, knobs={"x_vector_only": True}, save_voice=out,
                max_frames=3, seed=1, ignore_eos=True)
    audio = run(p, r)
    assert audio[0].shape == (3 * 1920,)
    v = load_voice(out, p.args.tts_model_size, 32)
    assert v.ref_codes is None and v.x_vector.shape == (32,)
    assert float(mx.abs(v.x_vector).sum()) > 0
    again = run(p, Request(text="Hello.", voice=str(out), max_frames=3, seed=1, ignore_eos=True))
    np.testing.assert_allclose(again[0], audio[0], atol=1e-6)


def test_usage_errors():
    p = pipeline("tiny-customvoice")
    with pytest.raises(UsageError, match="unknown sampling"):
        run(p, Request(text="Hi", voice="ryan", knobs={"temprature": 0.5}))
    with pytest.raises(UsageError, match="top_p"):
        run(p, Request(text="Hi", voice="ryan", knobs={"top_p": 0.0}))
    with pytest.raises(UsageError, match="unknown voice"):
        run(p, Request(text="Hi", voice="zed"))
    with pytest.raises(UsageError, match="needs a Base model"):
        run(p, Request(text="Hi", voice="v.safetensors"))
    b = pipeline("tiny-base")
    with pytest.raises(UsageError, match="no preset voices"):
        run(b, Request(text="Hi", voice="ryan"))
    with pytest.raises(UsageError, match="reference audio"):
        run(b, Request(text="Hi"))
    with pytest.raises(UsageError, match="ref-text"):
        run(b, Request(text="Hi", ref_audio=np.zeros(2400, np.float32) + 0.1, ref_sample_rate=24000))


def test_engine_checks_against_the_family_declaration():
    """What Qwen3-TTS cannot honour is refused by the engine, before the pipeline runs."""
    from ttscli.generate import check_request
    from ttscli.models import get_family
    from ttscli.registry import load_registry

    fam, reg = get_family("qwen3_tts"), load_registry()
    cv, base = reg.resolve("qwen3-tts-0.6b-customvoice"), reg.resolve("qwen3-tts-0.6b-base")
    for spec, bad, match in [(cv, {"speed": 1.2}, "cannot honour --speed"),
                             (cv, {"knobs": {"temprature": 0.5}}, "no setting --temprature"),
                             (cv, {"knobs": {"top_p": 0.0}}, "top-p must be in"),
                             (cv, {"knobs": {"top_k": 2.5}}, "top-k takes an int"),
                             (cv, {"instruct": "calm"}, "cannot honour --instruct"),
                             (cv, {"voice": "zed"}, "has no voice 'zed'"),
                             (cv, {"language": "klingon"}, "does not speak"),
                             (base, {"ref_audio": None, "instruct": "calm"}, "cannot honour --instruct")]:
        with pytest.raises(UsageError, match=match):
            check_request(spec, fam, Request(text="Hi", **bad))
    ok = check_request(cv, fam, Request(text="Hi", voice="Ryan", language="English",
                                        knobs={"temperature": "0.7", "do_sample": "false"}))
    assert ok.knobs == {"temperature": 0.7, "do_sample": False}
