"""The one-kernel code-predictor frame (ttscli.models.qwen3_tts.cuda_frame): when it runs and when the MLX frame
does, and (``cuda``-marked, on MLX's CUDA backend only) its codes, logits and draws against the
MLX frame and against the same frame replayed in float32 on the CPU, at Qwen3-TTS 0.6B's real
dimensions with random weights."""
from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from ttscli.lm import SamplingParams, cuda_kernels
from ttscli.models.qwen3_tts import cuda_frame
from ttscli.lm.config import LMArgs
from ttscli.models.qwen3_tts.load import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "parity" / "qwen3-tiny-base"


@pytest.fixture(scope="module")
def predictor():
    model, _ = load_model(FIX)
    return model.talker.code_predictor


@pytest.fixture
def as_if_cuda(monkeypatch):
    """The gate's view of a CUDA machine with 132 multiprocessors (nothing is launched)."""
    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_frame, "multiprocessors", lambda: 132)


def test_off_cuda_the_mlx_frame_runs(predictor):
    p = SamplingParams(0.9, 50, 1.0)
    assert cuda_frame.unsupported(predictor, p) == "not on MLX's CUDA backend"
    predictor.reset_compiled()
    assert not isinstance(predictor.compiled_frame(p), cuda_frame.CodeFrameKernel)


def test_the_gate_on_cuda(predictor, as_if_cuda, monkeypatch):
    assert cuda_frame.unsupported(predictor, SamplingParams(do_sample=False)) is None
    assert cuda_frame.unsupported(predictor, SamplingParams(0.9, 50, 1.0)) is None
    for p in (SamplingParams(0.9, 50, 0.8), SamplingParams(0.9, 50, 1.0, 0.1),
              SamplingParams(0.9, 50, 1.0, 0.0, 1.1)):
        assert "top-p, min-p and repetition penalty" in cuda_frame.unsupported(predictor, p)
    # the switch and the gate decide what compiled_frame hands the loop
    predictor.reset_compiled()
    assert isinstance(predictor.compiled_frame(SamplingParams(0.9, 50, 1.0)), cuda_frame.CodeFrameKernel)
    predictor.reset_compiled()
    monkeypatch.setattr(type(predictor), "one_kernel_frame", False)
    assert not isinstance(predictor.compiled_frame(SamplingParams(0.9, 50, 1.0)), cuda_frame.CodeFrameKernel)
    monkeypatch.setenv(cuda_frame.ENV, "off")
    assert cuda_frame.unsupported(predictor, SamplingParams(do_sample=False)) == f"switched off ({cuda_frame.ENV})"
    monkeypatch.delenv(cuda_frame.ENV)
    predictor.reset_compiled()
    monkeypatch.setattr(cuda_frame, "multiprocessors", lambda: 0)
    assert "multiprocessor" in cuda_frame.unsupported(predictor, SamplingParams(do_sample=False))


def test_bf16_weights_keep_the_mlx_frame(predictor, as_if_cuda):
    w = predictor.model.layers[0].self_attn.q_proj.weight
    try:
        predictor.model.layers[0].self_attn.q_proj.weight = w.astype(mx.bfloat16)
        assert cuda_frame.unsupported(predictor, SamplingParams(do_sample=False)) == "float32 weights only"
    finally:
        predictor.model.layers[0].self_attn.q_proj.weight = w


def test_rows_that_do_not_fit_shared_memory_run_the_fallback(predictor, as_if_cuda):
    a = LMArgs(hidden_size=1024, num_hidden_layers=5, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
               intermediate_size=3072)
    assert cuda_frame.fits(a, 1024, 4, 2048) and not cuda_frame.fits(a, 1024, 5, 2048)
    assert cuda_frame.fits(a, 2048, 2, 2048) and not cuda_frame.fits(a, 2048, 4, 2048)   # 1.7B: wider inputs
    calls = []

    def fallback(*args):
        calls.append(len(args))
        return "mlx frame"

    H = predictor.model.codec_embedding[0].weight.shape[1]
    rows = cuda_frame.MAX_ROWS + 1
    kern = cuda_frame.CodeFrameKernel(predictor, SamplingParams(0.9, 50, 1.0), fallback=fallback)
    keys = mx.zeros((15, 2), mx.uint32)
    assert kern(mx.zeros((rows, H)), mx.zeros((rows, H)), keys) == "mlx frame"
    greedy = cuda_frame.CodeFrameKernel(predictor, SamplingParams(do_sample=False), fallback=fallback)
    assert greedy(mx.zeros((rows, H)), mx.zeros((rows, H))) == "mlx frame"
    assert calls == [3, 2]


def test_a_predictor_with_an_input_projection_keeps_the_mlx_frame(predictor, as_if_cuda, monkeypatch):
    monkeypatch.setattr(type(predictor), "__contains__",
                        lambda self, key: key == "small_to_mtp_projection" or key in self.keys())
    assert "1.7B" in cuda_frame.unsupported(predictor, SamplingParams(do_sample=False))


def test_the_kernels_launch_matches_the_predictor(predictor, as_if_cuda, monkeypatch):
    """What CodeFrameKernel hands the kernel (shapes, template, scratch size, Gumbel noise per
    codebook), with a stand-in for the kernel; the kernel itself runs only on a GPU."""
    seen = {}

    def run(inputs, template, grid, threadgroup, output_shapes, output_dtypes, init_value):
        seen.update(inputs=inputs, template=dict(template), grid=grid, threadgroup=threadgroup,
                    shapes=output_shapes, init=init_value)
        return [mx.zeros(s, d) for s, d in zip(output_shapes, output_dtypes)]

    monkeypatch.setattr(cuda_frame, "_kernel", lambda: run)
    a = predictor.model.args
    H = predictor.model.codec_embedding[0].weight.shape[1]
    V = predictor.lm_head[0].weight.shape[0]
    rows = 2
    keys = mx.random.split(mx.random.key(0), 15)
    codes, total = cuda_frame.CodeFrameKernel(predictor, SamplingParams(0.9, 50, 1.0))(
        mx.zeros((rows, H)), mx.zeros((rows, H)), keys)
    t = seen["template"]
    assert (t["B"], t["L"], t["HC"], t["HIN"], t["V"], t["P"], t["NCB"], t["TOPK"], t["GREEDY"]) == (
        rows, a.num_hidden_layers, a.hidden_size, H, V, 16, 15, 50, False)
    assert t["VP"] >= V and t["VP"] & (t["VP"] - 1) == 0
    assert seen["grid"] == (128 * cuda_frame.THREADS, 1, 1) and seen["init"] == 0
    nqkv = (a.num_attention_heads + 2 * a.num_key_value_heads) * a.head_dim
    scratch = (32 + rows * (a.hidden_size + nqkv + a.num_attention_heads * a.head_dim + a.intermediate_size + V)
               + a.num_hidden_layers * 2 * rows * a.num_key_value_heads * 16 * a.head_dim)
    assert seen["shapes"] == [(rows, 15), (rows, H), (scratch,)]
    noise = seen["inputs"][-1]
    assert noise.shape == (15, rows, V)
    assert mx.array_equal(noise[3], mx.random.gumbel((rows, V), key=keys[3])).item()   # sample()'s draw for key 3
    assert codes.shape == (rows, 15) and total.shape == (rows, H)


SETTINGS = {"greedy": SamplingParams(do_sample=False), "t0.9_k50": SamplingParams(0.9, 50, 1.0),
            "t1.0_nok": SamplingParams(1.0, 0, 1.0)}


@pytest.fixture(scope="module")
def real_predictor():
    """Qwen3-TTS 0.6B's code predictor at its real dimensions (what the kernel is sized for)."""
    from ttscli.api import load
    from ttscli.models.base import LoadOptions

    return load("qwen3-tts-0.6b-base", options=LoadOptions(random_weights=True)).model.talker.code_predictor


def replay_last_logits(cp, hidden, c0, codes):
    """The MLX frame fed the kernel's codes (so it sees exactly the kernel's inputs): its last logits."""
    seen = {}

    def draw(j, logits):
        seen[j] = logits
        return codes[:, j]

    cp.frame_with(hidden, c0, draw)
    return seen


@pytest.mark.cuda
@pytest.mark.parametrize("rows", [1, 2, 4])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_the_kernel_frame_equals_the_mlx_frame(real_predictor, setting, rows):
    from ttscli.lm.sample import KeyStream, sample

    cp, params = real_predictor, SETTINGS[setting]
    assert cuda_frame.unsupported(cp, params) is None
    kern = cuda_frame.CodeFrameKernel(cp, params)
    H = cp.model.codec_embedding[0].weight.shape[1]
    mx.random.seed(rows)
    hidden = mx.random.normal((rows, H))
    c0 = mx.random.normal((rows, H)) * 0.1
    keys = KeyStream(rows).take(16)[1:]
    args = (hidden, c0) if params.greedy else (hidden, c0, keys)
    codes, total, scratch = kern.run(*args)
    ref_codes, ref_total = cp._mlx_frame(params)(*args)
    mx.eval(codes, total, scratch, ref_codes, ref_total)
    assert mx.array_equal(codes, ref_codes).item(), f"{setting}, {rows} rows: codes differ from the MLX frame's"

    kernel_logits = kern.last_logits(scratch, rows)
    gpu_seen = replay_last_logits(cp, hidden, c0, codes)
    with mx.stream(mx.cpu):
        cpu_last = replay_last_logits(cp, hidden, c0, codes)[len(cp.lm_head) - 1]
        mx.eval(cpu_last)
    scale = float(mx.abs(cpu_last).max().item())
    # float32 on the CPU is the reference; MLX's own GPU frame is further from it (TF32 GEMMs)
    assert float(mx.abs(kernel_logits - cpu_last).max().item()) <= 1e-4 * max(scale, 1.0)
    assert float(mx.abs(total - ref_total).max().item()) <= 1e-2 * max(float(mx.abs(ref_total).max().item()), 1.0)
    if not params.greedy:
        V = cp.lm_head[0].weight.shape[0]
        batched = mx.vmap(lambda k: mx.random.gumbel((rows, V), key=k))(keys)
        per_key = mx.stack([mx.random.gumbel((rows, V), key=keys[j]) for j in range(keys.shape[0])])
        assert mx.array_equal(batched, per_key).item()
        for j, logits in gpu_seen.items():          # each draw is sample() on the replayed logits
            assert mx.array_equal(sample(logits, params, keys[j]), codes[:, j]).item(), f"codebook {j + 1}"
