"""CosyVoice3's LM, DiT flow and causal HiFT against the upstream CosyVoice code (commit ace7c47).

Fixtures from scripts/goldens/cosyvoice3_upstream.py: a tiny checkpoint in the published layout
(cosyvoice3.yaml, llm.pt, flow.pt, hift.pt, CosyVoice-BlankEN/config.json) built by upstream's
own classes, and what upstream computed with it, including the fixed noise its flow and source read.
"""
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ttscli.errors import CheckpointError
from ttscli.models.cosyvoice3.config import read_args
from ttscli.models.cosyvoice3.llm import CosyVoice3LM, Draw
from ttscli.models.cosyvoice3.load import load_flow, load_hift, load_llm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cosyvoice3"
TINY = FIX / "tiny"


@pytest.fixture(scope="module")
def golden():
    return dict(np.load(FIX / "goldens.npz"))


@pytest.fixture(scope="module")
def args():
    return read_args(TINY)


def test_args_from_the_published_yaml(args):
    assert args.lm.qkv_bias and not args.lm.attention_bias and not args.lm.qk_norm
    assert (args.speech_token_size, args.flow.dim, args.flow.depth, args.flow.static_chunk_size) == (64, 64, 2, 50)
    assert (args.hift.base_channels, args.hift.conv_pre_look_right, args.hift.upsample_rates) == (32, 4, (8, 5, 3))
    assert (args.sampling.top_p, args.sampling.top_k, args.sampling.win_size) == (0.8, 25, 10)


def test_lm_on_onnxruntime_float32_matches_upstream(args, golden):
    """The LM's float32 ONNX graph (the default code decoder on a Linux CPU): upstream's
    log-probabilities and its 20 greedy tokens; an int8 graph runs and draws valid ids."""
    pytest.importorskip("onnxruntime")
    from ttscli.models.cosyvoice3.onnx_lm import attach

    lm = load_llm(TINY, args)
    assert attach(lm, "onnx-f32", TINY, "tiny") == "onnx-float32"
    embeds = lm.prompt(golden["lm_text"].tolist(), golden["lm_prompt_speech"].tolist())
    logits, _ = lm.decoder.prefill(embeds, lm.decoder.new_cache())
    assert np.abs(np.array(lm.log_softmax(logits)[0]) - golden["lm_logp"]).max() < 1e-4
    greedy = Draw(args.sampling, np.random.default_rng(0), greedy=True)
    tokens = [t for _, t in zip(range(20), lm.generate(embeds, greedy, 0, 40))]
    assert tokens == golden["lm_greedy"].tolist()
    assert attach(lm, "onnx-int8", TINY, "tiny") == "onnx-int8"
    tokens = [t for _, t in zip(range(20), lm.generate(embeds, greedy, 0, 40))]
    assert len(tokens) >= 1 and all(0 <= t < args.speech_token_size for t in tokens)


def test_lm_prefill_and_20_greedy_tokens(args, golden):
    lm = load_llm(TINY, args)
    embeds = lm.prompt(golden["lm_text"].tolist(), golden["lm_prompt_speech"].tolist())
    np.testing.assert_array_equal(np.array(embeds[0]), golden["lm_input"])
    hidden = np.array(lm.backbone(input_embeddings=embeds)[0])
    ref = golden["lm_hidden"]
    cos = (hidden * ref).sum(-1) / np.linalg.norm(hidden, axis=-1) / np.linalg.norm(ref, axis=-1)
    assert cos.min() >= 0.99999
    logp = np.array(lm.logp(lm.backbone(input_embeddings=embeds))[0])
    assert np.abs(logp - golden["lm_logp"]).max() < 1e-4
    tokens = []
    for tok in lm.generate(embeds, Draw(args.sampling, np.random.default_rng(0), greedy=True), 0, 40):
        tokens.append(tok)
        if len(tokens) == 20:
            break
    assert tokens == golden["lm_greedy"].tolist()


def test_lm_through_the_gpu_decode_path_gives_upstreams_tokens(args, golden, monkeypatch):
    """The path a GPU takes (the shared code decoder: fused q/k/v with their biases, a compiled
    step over fixed-capacity caches), run here on the CPU: upstream's 20 greedy tokens."""
    import ttscli.nn.fastmath as fastmath
    from ttscli.lm import MLXCodeDecoder

    lm = load_llm(TINY, args)
    monkeypatch.setattr(fastmath, "on_cpu", lambda: False)
    decoder = lm.step_decoder()
    assert isinstance(decoder, MLXCodeDecoder) and decoder.compiled and lm.step_decoder() is decoder
    embeds = lm.prompt(golden["lm_text"].tolist(), golden["lm_prompt_speech"].tolist())
    draw = Draw(args.sampling, np.random.default_rng(0), greedy=True)
    tokens = [t for _, t in zip(range(20), lm.generate(embeds, draw, 0, 40))]
    assert tokens == golden["lm_greedy"].tolist()


@pytest.mark.parametrize("backend", ["mlx", "onnx", "mlx-gpu-loop"])
@pytest.mark.parametrize("key,streaming,finalize", [("flow_mel", False, True), ("flow_mel_stream", True, True),
                                                     ("flow_mel_chunk", True, False)])
def test_flow_mel_within_1e4_of_peak(args, golden, key, streaming, finalize, backend, monkeypatch):
    """``mlx-gpu-loop``: the Euler loop a GPU runs (each step one compiled trace, no sync between
    steps), here on the CPU."""
    from ttscli.codecs.s3gen.flow import CausalConditionalCFM

    flow = load_flow(TINY, args)
    if backend == "mlx-gpu-loop":
        monkeypatch.setattr(CausalConditionalCFM, "compiled", True)
        monkeypatch.setattr(CausalConditionalCFM, "sync_steps", False)
    if backend == "onnx":
        pytest.importorskip("onnxruntime")
        from ttscli.codecs.s3gen import onnx_dit

        onnx_dit.attach(flow, TINY, "tiny")
        assert isinstance(flow.decoder.external_estimator, onnx_dit.OnnxDiT)
    tokens = golden["flow_tokens"]
    if not finalize:
        tokens = tokens[: int(golden["flow_chunk_tokens"])]
    mel = np.array(flow(mx.array(tokens), mx.array(golden["flow_prompt_tokens"]), mx.array(golden["flow_prompt_feat"]),
                        mx.array(golden["flow_embedding"]), mx.array(golden["flow_noise"]),
                        streaming=streaming, finalize=finalize))
    ref = golden[key]
    assert mel.shape == ref.shape
    assert np.abs(mel - ref).max() <= 1e-4 * np.abs(ref).max()


def test_dit_on_onnxruntime_int8_and_int4(args, golden):
    """The DiT's quantized graphs (``--backend flow_estimator=onnx-int8|onnx-int4``, opt-in):
    their own cache entries, and a mel near upstream's (int8 within 2% of peak, int4 within 20%
    on the tiny checkpoint); float32 is the test above."""
    pytest.importorskip("onnxruntime")
    from ttscli.codecs.s3gen import onnx_dit

    mels = {}
    for precision, bound in (("int8", 0.02), ("int4", 0.2)):
        flow = load_flow(TINY, args)
        onnx_dit.attach(flow, TINY, "tiny", precision)
        mel = np.array(flow(mx.array(golden["flow_tokens"]), mx.array(golden["flow_prompt_tokens"]),
                            mx.array(golden["flow_prompt_feat"]), mx.array(golden["flow_embedding"]),
                            mx.array(golden["flow_noise"])))
        err = np.abs(mel - golden["flow_mel"]).max() / np.abs(golden["flow_mel"]).max()
        assert 1e-4 < err <= bound, (precision, err)      # quantized: near, and not the float32 graph
        mels[precision] = mel
    assert not np.array_equal(mels["int8"], mels["int4"])


def test_hift_f0_source_and_waveform(args, golden):
    hift = load_hift(TINY, args)
    mel = mx.array(golden["hift_mel"])
    f0 = np.array(hift.f0_predictor(mel))
    assert np.abs(f0 - golden["hift_f0"]).max() <= 1e-4 * np.abs(golden["hift_f0"]).max()
    wav, source = hift(mel, mx.array(golden["hift_sine_noise"]))
    for got, ref in ((np.array(source), golden["hift_source"]), (np.array(wav), golden["hift_wav"])):
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()


def test_hift_streamed_prefix_is_final(args, golden):
    """Audio the streaming path releases for a partial mel equals the whole mel's."""
    hift = load_hift(TINY, args)
    mel, noise = mx.array(golden["hift_mel"]), mx.array(golden["hift_sine_noise"])
    whole = np.array(hift(mel, noise)[0])
    part = 16
    keep = hift.final_samples(part)
    assert keep > 0
    prefix = np.array(hift(mel[:part], noise)[0])[:keep]
    assert np.abs(prefix - whole[:keep]).max() <= 1e-5


def test_mis_shaped_tensor_is_named(args):
    from dataclasses import replace

    with pytest.raises(CheckpointError, match=r"llm\.pt.*speech_embedding\.weight"):
        load_llm(TINY, replace(args, speech_token_size=32))


def test_random_weights_at_real_size_build():
    from ttscli.models.cosyvoice3.config import CosyVoice3Args

    lm = CosyVoice3LM(CosyVoice3Args())
    assert lm.llm_decoder.weight.shape == (6761, 896)
    assert len(lm.backbone.layers) == 24
