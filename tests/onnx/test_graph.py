"""The shared ONNX LM graph against our MLX LM (ttscli.lm.model.DecoderLM) with the same
weights: a Llama-style stack (no q/k norm, attention biases, llama3 RoPE in all three bands)
and a Qwen3-style one (q/k norm, grouped KV), prefill + steps through the shared KV buffers,
including a buffer that grows mid-request; int8/int4 weights against float32."""
import numpy as np
import pytest
from random_lm import LLAMA, QWEN3, random_stack

import ttscli  # noqa: F401  (BLAS preload before mlx)
from ttscli.backends.onnx.graph import Quant, block_quantize, build_graph
from ttscli.backends.onnx.runtime import OnnxLM
from ttscli.errors import CheckpointError, UsageError
from ttscli.lm.config import LMArgs, stack_shapes

mx = pytest.importorskip("mlx.core")
pytest.importorskip("onnxruntime")

VOCAB, POSITIONS = 40, 24


def mlx_stack(args: LMArgs, seed: int):
    return random_stack(args, seed, VOCAB)


def saved(tmp_path, args, w, head, quant=None, block=8, name="lm"):
    import onnx

    model = build_graph(args, w, {"logits": head}, max_positions=64, quant=quant or Quant())
    onnx.save_model(model, str(tmp_path / f"{name}.onnx"))
    return OnnxLM(tmp_path, {"path": f"{name}.onnx", "layers": args.num_hidden_layers,
                             "kv_heads": args.num_key_value_heads, "head_dim": args.head_dim, "max_positions": 64,
                             "input_size": args.hidden_size, "hidden_size": args.hidden_size, "cache_block": block})


def reference(lm, head, x):
    h = np.array(lm(input_embeddings=mx.array(x)))[0]
    return h @ head.T, h


@pytest.mark.parametrize("config", [LLAMA, QWEN3], ids=["llama", "qwen3"])
def test_prefill_and_steps_match_mlx(tmp_path, config):
    args = LMArgs.from_hf(config)
    lm, w, head = mlx_stack(args, 0)
    x = np.random.default_rng(1).standard_normal((1, POSITIONS, args.hidden_size)).astype(np.float32)
    ref_logits, ref_hidden = reference(lm, head, x)
    g = saved(tmp_path, args, w, head)
    cache = g.new_cache()
    assert cache.capacity == 8
    logits, hidden = g.run(x[:, :5], cache, ("logits", "hidden"))
    assert logits.shape == (1, VOCAB) and hidden.shape == (1, args.hidden_size)
    np.testing.assert_allclose(logits[0], ref_logits[4], atol=1e-4)
    np.testing.assert_allclose(hidden[0], ref_hidden[4], atol=1e-4)
    for t in range(5, POSITIONS):      # the buffers grow past 8 positions on the way
        logits, hidden = g.run(x[:, t:t + 1], cache, ("logits", "hidden"))
        np.testing.assert_allclose(logits[0], ref_logits[t], atol=1e-4)
        np.testing.assert_allclose(hidden[0], ref_hidden[t], atol=1e-4)
    assert cache.offset == POSITIONS and cache.capacity >= POSITIONS
    # a restart only resets the offset: stale slots past it are never read
    cache.reset()
    (again,) = g.run(x[:, :3], cache, ("logits",))
    np.testing.assert_allclose(again[0], ref_logits[2], atol=1e-4)


def cosine(a, b):
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_low_bit_weights_against_float32(tmp_path):
    cfg = {**QWEN3, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "head_dim": 64,
           "num_key_value_heads": 2}
    args = LMArgs.from_hf(cfg)
    lm, w, head = mlx_stack(args, 3)
    x = np.random.default_rng(4).standard_normal((1, 12, args.hidden_size)).astype(np.float32)
    ref, _ = reference(lm, head, x)
    got = {}
    for prec in ("int8", "int4"):
        g = saved(tmp_path, args, w, head, Quant(prec), name=prec)
        got[prec] = g.run(x, g.new_cache(), ("logits",))[0][0]
    assert cosine(got["int8"], ref[-1]) >= 0.999
    assert 0.9 <= cosine(got["int4"], ref[-1]) < cosine(got["int8"], ref[-1])


def test_block_quantize_roundtrip():
    """onnxruntime's packing read back by hand: symmetric blocks, default zero point."""
    w = np.random.default_rng(0).standard_normal((6, 64)).astype(np.float32)
    packed, scales = block_quantize(w, 8, 32)
    assert packed.shape == (6, 2, 32) and scales.shape == (12,)
    deq = (packed.astype(np.float32) - 128) * scales.reshape(6, 2, 1)
    np.testing.assert_allclose(deq.reshape(6, 64), w, atol=float(scales.max()))
    assert np.abs(deq.reshape(6, 64) - w).max() > 0        # it is quantized, not copied


def test_missing_tensor_and_bad_precision():
    args = LMArgs.from_hf(QWEN3)
    w = {k: np.zeros(s, np.float32) for k, s in stack_shapes(args).items()}
    del w["layers.1.mlp.up_proj.weight"]
    with pytest.raises(CheckpointError, match="layers.1.mlp.up_proj.weight"):
        build_graph(args, w, {}, max_positions=8)
    with pytest.raises(UsageError, match="int8, int4"):
        Quant("int2")


@pytest.mark.parametrize("prec", ["float32", "int8"])
def test_heads_chosen_by_an_input(tmp_path, prec):
    """Five heads behind one output picked by ``head``: each pick equals that head alone, and a
    step runs one head's matmul, not five (onnxruntime's profile lists the nodes it ran)."""
    import json

    import onnx
    import onnxruntime as ort

    args = LMArgs.from_hf(QWEN3)
    lm, w, _ = mlx_stack(args, 5)
    rng = np.random.default_rng(6)
    heads = {f"logits_{j}": rng.standard_normal((VOCAB, args.hidden_size)).astype(np.float32) for j in range(5)}
    x = rng.standard_normal((1, 6, args.hidden_size)).astype(np.float32)
    q = Quant(prec, 16)
    sel_graph = build_graph(args, w, heads, max_positions=64, quant=q, head_select="head")
    onnx.save_model(sel_graph, str(tmp_path / "s.onnx"))
    onnx.save_model(build_graph(args, w, heads, max_positions=64, quant=q), str(tmp_path / "all.onnx"))
    entry = {"layers": args.num_hidden_layers, "kv_heads": args.num_key_value_heads, "head_dim": args.head_dim,
             "max_positions": 64, "input_size": args.hidden_size, "hidden_size": args.hidden_size}
    sel = OnnxLM(tmp_path, {**entry, "path": "s.onnx", "head_select": {"input": "head", "count": 5}})
    every = OnnxLM(tmp_path, {**entry, "path": "all.onnx"})
    for j in (0, 3, 4, 1, 2):
        got = sel.run(x, sel.new_cache(), ("logits",), head=j)[0]
        want = every.run(x, every.new_cache(), (f"logits_{j}",))[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    so = ort.SessionOptions()
    so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / "prof")
    sel.session = ort.InferenceSession(str(tmp_path / "s.onnx"), so, providers=["CPUExecutionProvider"])
    sel.run(x[:, :1], sel.new_cache(), ("logits",), head=2)
    events = json.load(open(sel.session.end_profiling()))
    op = "MatMulNBits" if prec == "int8" else "MatMul"
    ran = {e["name"] for e in events if e.get("cat") == "Node" and e.get("args", {}).get("op_name") == op}
    per_layer = 4          # fused qkv, o, fused gate/up, down
    assert len(ran) == args.num_hidden_layers * per_layer + 1


@pytest.mark.parametrize("limit", [127, 63])
def test_dynamic_int8_linear(limit, monkeypatch):
    """``DynamicQuantizeMatMul``: int8 weights per output channel up to the CPU's limit (63 where
    the u8 x s8 kernel adds pairs in int16), activations quantized per tensor at run time: near the
    float32 product, not equal to it; the limit is part of the cache tag."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from ttscli.backends.onnx import graph

    monkeypatch.setattr(graph, "int8_weight_limit", lambda: limit)
    rng = np.random.default_rng(0)
    w, bias = rng.standard_normal((48, 64)).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    x = rng.standard_normal((2, 5, 64)).astype(np.float32)
    b = graph.Builder(Quant("int8"), dynamic_int8=True)
    b.linear("x", w, bias, "l", out="y")
    model = graph.finish(b, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 64])],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 48])])
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeMatMul"]
    stored = next(t for t in model.graph.initializer if t.name == "l.weight_i8")
    from onnx import numpy_helper

    assert np.abs(numpy_helper.to_array(stored)).max() == limit
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ref = x @ w.T + bias
    err = np.abs(y - ref).max() / np.abs(ref).max()
    assert 1e-5 < err < (0.02 if limit == 127 else 0.04)
    assert graph.dynamic_int8_tag() == f"dynamic-int8-w{limit}"
    # without the flag an int8 linear stays block-quantized
    plain = graph.Builder(Quant("int8"))
    plain.linear("x", w, bias, "l", out="y")
    assert [n.op_type for n in plain.nodes] == ["MatMulNBits"]
