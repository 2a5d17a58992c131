"""The one-kernel decode step (ttscli.lm.cuda_step): when it may run, what the decoder hands it and
keeps, and (``cuda``-marked, on MLX's CUDA backend only) its logits, argmax and cache against MLX's
compiled step and against float32 on the CPU, at the real dimensions with random weights."""
from __future__ import annotations

from pathlib import Path

import pytest

from ttscli.lm import MLXCodeDecoder, cuda_kernels, cuda_step
from ttscli.models.qwen3_tts.load import load_model

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "parity" / "qwen3-tiny-base"


@pytest.fixture(scope="module")
def talker():
    model, _ = load_model(FIX)
    return model.talker


def test_never_off_cuda(talker):
    lm, head = talker.step_parts()
    assert cuda_step.unsupported(lm, head, 1) == "not on MLX's CUDA backend"
    assert MLXCodeDecoder(talker, compiled=False)._step_kernel(1) is None
    assert MLXCodeDecoder(talker, compiled=True)._step_kernel(1) is None


def test_the_gate_on_cuda(talker, monkeypatch):
    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_step, "multiprocessors", lambda: 132)
    lm, head = talker.step_parts()
    assert cuda_step.unsupported(lm, head, 1) is None
    assert "rows" in cuda_step.unsupported(lm, head, cuda_step.MAX_ROWS + 1)


def test_any_weight_not_float32_keeps_mlx_ops(talker, monkeypatch):
    """The step kernel reads every weight as float32: one bfloat16 norm (the rest float32, as a
    bf16 checkpoint's norms can be) is enough to run MLX's ops instead; the small kernels take
    float32, bfloat16 and float16 arrays and nothing else."""
    import mlx.core as mx

    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_step, "multiprocessors", lambda: 132)
    lm, head = talker.step_parts()
    w = lm.norm.weight
    try:
        lm.norm.weight = w.astype(mx.bfloat16)
        assert cuda_step.unsupported(lm, head, 1) == "float32 weights only"
    finally:
        lm.norm.weight = w
    assert cuda_step.unsupported(lm, head, 1) is None
    assert cuda_kernels.supports(mx.zeros(2, mx.bfloat16), mx.zeros(2, mx.float16), mx.zeros(2))
    assert not cuda_kernels.supports(mx.zeros(2), mx.zeros(2, mx.int32))


def test_the_step_hands_the_kernel_one_cache_and_keeps_its_views(talker, monkeypatch):
    """The decoder's side of the kernel (inputs, the stacked cache in and out, the caches'
    views and offsets) with a stand-in that does what the kernel does to the cache (copies the
    earlier positions, writes this one with recognisable keys/values); the kernel itself runs
    only on a GPU (test_the_kernel_step_against_float32_on_the_cpu)."""
    import mlx.core as mx

    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_step, "multiprocessors", lambda: 132)
    seen, outs = [], []

    def run(inputs, template, grid, threadgroup, output_shapes, output_dtypes, init_value):
        pos = int(inputs[1].item())
        cache = inputs[2 + len(cuda_step.KINDS)]
        seen.append(dict(pos=pos, n_inputs=len(inputs), template=dict(template), cache=cache))
        (B, V), (_, H), cshape, _ = output_shapes
        assert cshape == cache.shape
        out = mx.zeros(cshape)
        out[..., :pos, :] = cache[..., :pos, :]
        out[:, 0, ..., pos, :] = 7.0 + pos
        out[:, 1, ..., pos, :] = -7.0 - pos
        outs.append(out)
        return mx.zeros((B, V)), mx.ones((B, H)), out, mx.zeros(output_shapes[3])

    monkeypatch.setattr(cuda_step, "_kernel", lambda: run)
    talker.__dict__.pop("_ttscli_step_kernels", None)      # the verdict of a test run off CUDA
    monkeypatch.setattr(MLXCodeDecoder, "step_kernel", True)
    dec = MLXCodeDecoder(talker, compiled=True)
    H = talker.args.hidden_size
    L = len(talker.model.layers)
    cache = dec.new_cache()
    mx.eval(dec.prefill(mx.random.normal((1, 5, H)), cache))
    before = [mx.array(c.keys[..., :5, :]) for c in cache]
    for _ in range(2):
        logits, hidden = dec.step(mx.random.normal((1, 1, H)), cache)
        mx.eval(logits, hidden)
    assert [s["pos"] for s in seen] == [5, 6]
    assert seen[0]["n_inputs"] == 2 + len(cuda_step.KINDS) + 1 + 4 and seen[0]["template"]["L"] == L
    assert seen[0]["cache"].shape[:2] == (L, 2)
    assert all(c.offset == 7 for c in cache)
    assert seen[1]["cache"] is outs[0]                         # the first step's output, not a re-stack;
    for i, c in enumerate(cache):                                # the caches are views of the last one
        assert c.keys.shape == cache[0].keys.shape
        assert float(mx.abs(c.keys[..., 5, :] - 7.0 - 5).max().item()) == 0.0
        assert float(mx.abs(c.values[..., 6, :] + 7.0 + 6).max().item()) == 0.0
        assert float(mx.abs(c.keys[..., :5, :] - before[i]).max().item()) == 0.0   # the prefill kept
    assert cuda_step.LMStepKernel._stacked(cache) is outs[1]  # what the next step would get
    cache[0].keys = cache[0].keys + 0                            # a cache changed behind its back: stacked again
    assert cuda_step.LMStepKernel._stacked(cache) is not outs[1]
    assert float(hidden.min().item()) == 1.0


def step_model(model_id: str):
    """The code decoder's LM-head model of ``model_id`` at its real size, random weights."""
    from ttscli.api import load
    from ttscli.models.base import LoadOptions

    pipe = load(model_id, options=LoadOptions(random_weights=True))
    model = getattr(pipe, "model", None)
    return getattr(model, "talker", None) or getattr(pipe, "t3", None) or model


def cpu_reference(talker, emb, xs):
    """Prefill and steps in float32 on the CPU through the plain layer path (no kernels of ours)."""
    import mlx.core as mx

    from ttscli.lm import DecoderLM
    from ttscli.lm.model import LMAttention

    switches = (DecoderLM.flat_decode, DecoderLM.fused_norms, LMAttention.fused_qk_rope, LMAttention.fused_attention)
    DecoderLM.flat_decode = DecoderLM.fused_norms = LMAttention.fused_qk_rope = LMAttention.fused_attention = False
    try:
        with mx.stream(mx.cpu):
            cache = talker.new_cache()
            talker(emb, cache)
            ref = [talker(x, cache) for x in xs]
            mx.eval(ref)
    finally:
        (DecoderLM.flat_decode, DecoderLM.fused_norms, LMAttention.fused_qk_rope,
         LMAttention.fused_attention) = switches
    return ref


def kernel_and_mlx_steps(talker, dec, emb, xs, monkeypatch):
    """Prefill ``emb`` into two identical caches, then step each of ``xs`` through MLX's compiled
    step and through the kernel: per step ``(mlx (logits, hidden), kernel (logits, hidden), CPU
    float32 (logits, hidden))``, evaluated; finally the two caches."""
    import mlx.core as mx

    mlx_cache, kernel_cache = dec.new_cache(), dec.new_cache()
    mx.eval(dec.prefill(emb, mlx_cache), dec.prefill(emb, kernel_cache),
            [c.state for c in mlx_cache + kernel_cache])
    ref = cpu_reference(talker, emb, xs)
    for i, x in enumerate(xs):
        monkeypatch.setattr(MLXCodeDecoder, "step_kernel", False)
        mlx_out = dec.step(x, mlx_cache)
        monkeypatch.setattr(MLXCodeDecoder, "step_kernel", True)
        out = dec.step(x, kernel_cache)
        mx.eval(mlx_out, out)
        yield mlx_out, out, ref[i]
    yield mlx_cache, kernel_cache


@pytest.mark.cuda
@pytest.mark.parametrize("model_id", ["qwen3-tts-0.6b-base", "chatterbox"])
def test_the_kernel_step_against_float32_on_the_cpu(model_id, monkeypatch):
    """A 200-position prefill into two identical caches, then 20 steps on the same inputs through
    MLX's compiled step and through the kernel, 1 and 2 rows: the kernel's argmax is the CPU's
    wherever the CPU's top two logits are further apart than twice its error, its logits and hidden
    state are as close to the CPU's as MLX's own GPU step is, and the keys it writes are MLX's."""
    import mlx.core as mx

    talker = step_model(model_id)
    dec = MLXCodeDecoder(talker)
    lm, head = talker.step_parts()
    assert cuda_step.unsupported(lm, head, 1) is None
    H = lm.args.hidden_size
    for rows in (1, 2):
        mx.random.seed(rows)
        emb = mx.random.normal((rows, 200, H)) * 0.5
        xs = [mx.random.normal((rows, 1, H)) * 0.5 for _ in range(20)]
        mx.eval(emb, xs)
        *steps, (mlx_cache, kernel_cache) = kernel_and_mlx_steps(talker, dec, emb, xs, monkeypatch)
        for i, ((mlx_logits, mlx_hidden), (logits, hidden), (cpu_logits, cpu_hidden)) in enumerate(steps):
            err = float(mx.abs(logits - cpu_logits).max().item())
            mlx_err = float(mx.abs(mlx_logits - cpu_logits).max().item())
            top2 = mx.sort(cpu_logits, axis=-1)
            gap = float((top2[:, -1] - top2[:, -2]).min().item())
            where = f"{model_id}, {rows} rows, step {i}"
            assert mx.array_equal(logits.argmax(-1), cpu_logits.argmax(-1)).item() or gap < 2 * err, where
            assert err <= 2 * mlx_err + 1e-4, f"{where}: {err:.2e} from the CPU, MLX's step {mlx_err:.2e}"
            hidden_err = float(mx.abs(hidden - cpu_hidden).max().item())
            assert hidden_err <= 2 * float(mx.abs(mlx_hidden - cpu_hidden).max().item()) + 1e-4, where
        n = mlx_cache[0].offset
        assert n == kernel_cache[0].offset == 220
        for p, q in zip(mlx_cache, kernel_cache):
            scale = max(float(mx.abs(p.keys[..., 200:n, :]).max().item()), 1.0)
            new = float(mx.abs(p.keys[..., 200:n, :] - q.keys[..., 200:n, :]).max().item())
            assert new <= 1e-2 * scale, f"{model_id}, {rows} rows: the kernel's cache keys differ by {new:.2e}"


class HeadLM:
    """A shared-LM stack with a bias-free head, as the code decoder wraps a family's LM."""

    def __init__(self, args):
        from mlx import nn

        from ttscli.lm import DecoderLM

        self.args = args
        self.model = DecoderLM(args)
        self.head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)

    def named_modules(self):
        return [("model", self.model), *self.model.named_modules(), ("head", self.head)]

    def new_cache(self):
        return self.model.make_cache()

    def __call__(self, embeds, cache):
        h = self.model(input_embeddings=embeds, cache=cache)[:, -1]
        return self.head(h), h

    def step_parts(self):
        return self.model, self.head


def stack_args(kind: str):
    """Small stacks of the two layer variants the kernel gained: Qwen2's q/k/v biases
    (CosyVoice3's LM) and MiniCPM's muP residual scale with LongRoPE's attention factor."""
    from ttscli.lm.config import LMArgs, RopeArgs

    base = dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                intermediate_size=512, vocab_size=300, rms_norm_eps=1e-6)
    if kind == "qkv-bias":
        return LMArgs(**base, qkv_bias=True)
    rope = RopeArgs(type="longrope", theta=10000.0, short_factor=tuple(1.0 + 0.05 * i for i in range(32)),
                    long_factor=tuple(2.0 + 0.1 * i for i in range(32)), original_max_position_embeddings=4096,
                    max_position_embeddings=32768)
    return LMArgs(**base, residual_scale=1.4 / 3 ** 0.5, rope=rope)


@pytest.mark.parametrize("kind", ["qkv-bias", "mup-longrope"])
def test_the_gate_takes_qkv_biases_and_scaled_residuals(kind, monkeypatch):
    import mlx.core as mx

    monkeypatch.setattr(cuda_kernels, "available", lambda: True)
    monkeypatch.setattr(cuda_step, "multiprocessors", lambda: 132)
    lm = HeadLM(stack_args(kind))
    assert cuda_step.unsupported(*lm.step_parts(), 1) is None
    k = cuda_step.LMStepKernel(*lm.step_parts())
    bias = k.weights[cuda_step.KINDS.index("bqkv")]
    assert bias.shape == (3, (4 + 2 * 2) * 64)
    assert (float(mx.abs(bias).max().item()) > 0) == (kind == "qkv-bias")
    eps, scale, rscale = k.tail[-1].tolist()
    assert scale == pytest.approx(lm.model.layers[0].self_attn.scale)
    assert rscale == pytest.approx(lm.args.residual_scale)


@pytest.mark.cuda
@pytest.mark.parametrize("kind", ["qkv-bias", "mup-longrope"])
def test_the_kernel_step_of_the_new_layer_variants(kind, monkeypatch):
    """As test_the_kernel_step_against_float32_on_the_cpu, on small stacks with q/k/v biases or
    a scaled residual and LongRoPE (fast enough for the CPU reference on any machine)."""
    import mlx.core as mx

    mx.random.seed(0)
    talker = HeadLM(stack_args(kind))
    mx.eval(talker.model.parameters(), talker.head.parameters())
    dec = MLXCodeDecoder(talker)
    assert cuda_step.unsupported(*talker.step_parts(), 2) is None
    H = talker.args.hidden_size
    for rows in (1, 2):
        emb = mx.random.normal((rows, 50, H))
        xs = [mx.random.normal((rows, 1, H)) for _ in range(10)]
        mx.eval(emb, xs)
        *steps, _ = kernel_and_mlx_steps(talker, dec, emb, xs, monkeypatch)
        for i, ((mlx_logits, _), (logits, hidden), (cpu_logits, cpu_hidden)) in enumerate(steps):
            err = float(mx.abs(logits - cpu_logits).max().item())
            mlx_err = float(mx.abs(mlx_logits - cpu_logits).max().item())
            where = f"{kind}, {rows} rows, step {i}"
            assert err <= 2 * mlx_err + 1e-4, f"{where}: {err:.2e} from the CPU, MLX's step {mlx_err:.2e}"
            assert float(mx.abs(hidden - cpu_hidden).max().item()) <= 1e-3, where
