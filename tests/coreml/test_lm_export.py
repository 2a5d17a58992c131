"""The shared LM export on stacks other than the Qwen3-TTS talker, against our MLX LM
(ttscli.lm.model.DecoderLM) with the same weights: a Llama-style stack (no q/k norm, biases,
llama3 RoPE scaling) and a Qwen3-style one, run through the saved package's MIL program."""
import numpy as np
import pytest
from mil_interp import InterpretedModel
from random_lm import LLAMA, QWEN3, random_stack

from ttscli.backends.coreml.decoder import CoreMLCodeDecoder
from ttscli.errors import CheckpointError
from ttscli.lm.config import LMArgs, stack_shapes
from ttscli.lm.rope import inv_freq

mx = pytest.importorskip("mlx.core")

QWEN3 = {**QWEN3, "hidden_size": 32, "head_dim": 8, "intermediate_size": 40}
VOCAB, CAPACITY, POSITIONS = 40, 24, 20


def mlx_stack(args: LMArgs, seed: int):
    """Weights rounded to fp16: what the package stores."""
    return random_stack(args, seed, VOCAB, np.float16)


@pytest.mark.parametrize("config", [LLAMA, QWEN3], ids=["llama3-rope-no-qk-norm-bias", "qwen3"])
def test_exported_stack_matches_the_mlx_lm(tmp_path, config):
    from ttscli.backends.coreml.export import export_lm

    args = LMArgs.from_hf(config)
    lm, w, head = mlx_stack(args, seed=3)
    assert set(w) == set(stack_shapes(args))           # the export reads the MLX LM's own names
    entry = export_lm(args, w, tmp_path, "lm.mlpackage", capacity=CAPACITY, head=head, precision="float32")
    assert entry["lm"]["qk_norm"] == args.qk_norm and entry["lm"]["rope"]["type"] == args.rope.type
    dec = CoreMLCodeDecoder(InterpretedModel(tmp_path / "lm.mlpackage", fp16=False), entry)

    x = np.random.default_rng(4).standard_normal((1, POSITIONS, args.hidden_size)).astype(np.float32)
    hidden = np.array(lm(input_embeddings=mx.array(x), cache=lm.make_cache()))[0]
    cache = dec.new_cache()
    got = [dec.step(x[:, i:i + 1], cache) for i in range(POSITIONS)]
    np.testing.assert_allclose(np.concatenate([h for _, h in got]), hidden, atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.concatenate([lg for lg, _ in got]), hidden @ head.T, atol=1e-4, rtol=0)


def test_llama3_scaling_moves_only_the_long_wavelengths():
    """The config above puts rotary pairs in all three llama3 bands (kept, blended, divided), so
    the comparison would notice an export that ignored the scaling."""
    r = LMArgs.from_hf(LLAMA).rope
    scaled, plain = inv_freq(r, 16), 1.0 / r.theta ** (np.arange(0, 16, 2) / 16)
    wavelen = 2 * np.pi / plain
    np.testing.assert_array_equal(scaled[wavelen < 64 / 4], plain[wavelen < 64 / 4])
    np.testing.assert_allclose(scaled[wavelen > 64], plain[wavelen > 64] / 8)
    mid = (wavelen >= 64 / 4) & (wavelen <= 64)
    assert mid.any() and np.all(scaled[mid] < plain[mid]) and np.all(scaled[mid] > plain[mid] / 8)


def test_a_missing_or_extra_tensor_is_named(tmp_path):
    from ttscli.backends.coreml.lm import build_step_program

    args = LMArgs.from_hf(LLAMA)
    w = {k: np.zeros(s, np.float32) for k, s in stack_shapes(args).items()}
    bad = dict(w)
    del bad["layers.1.self_attn.o_proj.bias"]
    bad["layers.0.self_attn.q_norm.weight"] = np.zeros(16, np.float32)    # Llama has no q norm
    with pytest.raises(CheckpointError, match=r"missing 1: layers.1.self_attn.o_proj.bias; "
                                              r"unexpected 1: layers.0.self_attn.q_norm.weight"):
        build_step_program(args, bad, CAPACITY)
