"""The CosyVoice3 pipeline on the tiny checkpoint: the three modes' prompts, streaming as
upstream composes it, saved and stored voices, limits and refusals."""
from pathlib import Path

import numpy as np
import pytest

from ttscli.errors import LimitReached, UsageError
from ttscli.models.base import Request

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3" / "tiny"
GREEDY = {"do_sample": False}


@pytest.fixture(scope="module")
def pipe():
    from ttscli.api import load

    return load("cosyvoice3", model_dir=TINY)


def ref_wav(seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(24000 * seconds)) / 24000
    return (0.2 * np.sin(2 * np.pi * 180 * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)


def test_mode_prompts(pipe):
    from ttscli.models.cosyvoice3.frontend import END_OF_PROMPT

    eop = pipe.tokenizer.token_to_id(END_OF_PROMPT)
    voice = pipe.encoder.voice(ref_wav(), 24000, "What I said.")
    zero = pipe.lm_prompt(Request(text="Hi.", ref_text="What I said."), voice)
    assert zero.speech == voice.tokens.tolist() and zero.text_ids.count(eop) == 1
    assert zero.text_ids[-3:] == pipe.tokenizer.encode("Hi.") and zero.min_len == 2 * 3 and zero.max_len == 20 * 3
    cross = pipe.lm_prompt(Request(text="Hi."), voice.__class__(voice.tokens, voice.feat, voice.embedding, None))
    assert cross.speech == [] and cross.text_ids.count(eop) == 1 and cross.text_ids[-3:] == zero.text_ids[-3:]
    inst = pipe.lm_prompt(Request(text="Hi.", instruct="Speak slowly."), voice)
    assert inst.speech == [] and eop in inst.text_ids
    assert pipe.tokenizer.decode(inst.text_ids).startswith("You are a helpful assistant. Speak slowly.")


def test_stream_is_upstreams_passes(pipe):
    """Streamed audio = HiFT over [chunk-masked flow mel up to the last hop | unmasked final mel],
    the first piece released before the LM ends."""
    r = Request(text="Hello there.", seed=0, max_frames=45, ignore_eos=True, knobs=GREEDY, stream=True)
    pieces = list(pipe.generate(r))
    assert len(pieces) == 2 and len(pieces[0]) > 0
    voice = pipe.voice(r)
    tokens = list(pipe.tokens(Request(text="Hello there.", seed=0, max_frames=45, ignore_eos=True, knobs=GREEDY),
                              voice))
    offset = 25 + (-len(voice.tokens) % 25)       # one hop, the reference padded to whole hops
    masked = pipe.mel(tokens, voice, streaming=True, finalize=True)[: 2 * offset]
    final = pipe.mel(tokens, voice, streaming=False, finalize=True)[2 * offset:]
    want = pipe.wav(np.concatenate([masked, final]))
    got = np.concatenate(pieces)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_clone_save_voice_and_reuse(pipe, tmp_path):
    path = tmp_path / "v.safetensors"
    r = Request(text="Hi there.", ref_audio=ref_wav(), ref_sample_rate=24000, ref_text="What I said.",
                save_voice=path, seed=0, max_frames=12, ignore_eos=True, knobs=GREEDY)
    a = np.concatenate(list(pipe.generate(r)))
    b = np.concatenate(list(pipe.generate(Request(text="Hi there.", voice=str(path), seed=0, max_frames=12,
                                                  ignore_eos=True, knobs=GREEDY))))
    assert a.shape == b.shape and np.abs(a - b).max() < 1e-6


def test_default_voice_is_the_stored_speaker(pipe):
    v = pipe.voice(Request(text="Hi."))
    assert v is pipe.speakers["tiny_speaker"] and v.text_ids == list(b"A reference.")
    p = pipe.lm_prompt(Request(text="Hi."), v)
    assert p.text_ids[: len(v.text_ids)] == v.text_ids and p.speech == v.tokens.tolist()


def test_limit_is_an_error(pipe):
    with pytest.raises(LimitReached, match="limit of 3 speech tokens"):
        list(pipe.generate(Request(text="Hello there.", seed=0, max_frames=3, knobs=GREEDY)))


def test_refusals(pipe, tmp_path):
    with pytest.raises(UsageError, match="no voice 'ryan'"):
        pipe.voice(Request(text="Hi.", voice="ryan"))
    with pytest.raises(UsageError, match="only without --stream"):
        list(pipe.generate(Request(text="Hi.", speed=1.5, stream=True)))
    with pytest.raises(UsageError, match="at most 30 s"):
        pipe.voice(Request(text="Hi.", ref_audio=np.zeros(24000 * 31, np.float32), ref_sample_rate=24000))


def test_speed_stretches_the_mel(pipe):
    r = dict(text="Hi there.", seed=0, max_frames=12, ignore_eos=True, knobs=GREEDY)
    a = np.concatenate(list(pipe.generate(Request(**r))))
    b = np.concatenate(list(pipe.generate(Request(**r, speed=2.0))))
    assert b.shape[0] == a.shape[0] // 2


def test_ras_sampling_repetition_fallback():
    """A draw repeated win_size * tau_r times in the window is masked and redrawn from the rest."""
    from ttscli.models.cosyvoice3.config import SamplingArgs
    from ttscli.models.cosyvoice3.llm import Draw, ras_sample

    logp = np.log(np.array([0.97, 0.01, 0.01, 0.01]))
    d = Draw(SamplingArgs(top_p=0.8, top_k=25, win_size=10, tau_r=0.1), np.random.default_rng(0))
    assert ras_sample(logp.copy(), [], d) == 0                     # the nucleus is id 0 alone
    assert all(ras_sample(logp.copy(), [0], d) != 0 for _ in range(20))   # one repeat: redrawn elsewhere


def test_backends_and_rows():
    """On a Linux CPU with onnxruntime the LM runs as its float32 graph and the DiT on
    onnxruntime; rows still batch (on the MLX LM, the same float32 arithmetic), except with a
    quantized LM graph, whose numbers are its own."""
    pytest.importorskip("onnxruntime")
    import sys

    from ttscli.api import load
    from ttscli.models.base import LoadOptions

    linux = sys.platform.startswith("linux")
    pipe = load("cosyvoice3", model_dir=TINY)
    assert pipe.backends["code_decoder"] == ("onnx-float32" if linux else "mlx")
    assert pipe.backends["flow_estimator"] == ("onnx-float32" if linux else "mlx")
    assert pipe.rows() is not None
    int8 = load("cosyvoice3", model_dir=TINY, options=LoadOptions(backends={"code_decoder": "onnx-int8"}))
    assert int8.backends["code_decoder"] == "onnx-int8" and int8.rows() is None
    with pytest.raises(UsageError, match="computes in float32"):
        load("cosyvoice3", model_dir=TINY, options=LoadOptions(dtype="bfloat16", backends={"code_decoder": "onnx"}))
