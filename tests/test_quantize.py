"""The one quantizer (ttscli/quantize.py): a family predicate of what stays in full precision,
checkpoints read back through the strict loader, foreign quantized checkpoints refused."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten

from ttscli import quantize
from ttscli.checkpoint import load_strict, read_safetensors
from ttscli.errors import CheckpointError, UsageError

FIX = Path(__file__).resolve().parent / "fixtures" / "qwen3_tts"


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 64)
        self.layers = [nn.Linear(64, 96), nn.Linear(96, 64)]
        self.odd = nn.Linear(48, 8)     # 48 is not a whole number of 32-wide groups
        self.head = nn.Linear(64, 16)

    def __call__(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = nn.gelu(layer(x))
        return self.head(x)


def _toy(seed=0):
    mx.random.seed(seed)
    m = Toy()
    mx.eval(m.parameters())
    return m


def test_the_predicate_decides_what_stays_in_full_precision():
    m = _toy()
    marker = quantize.quantize(m, bits=4, group_size=32, keep=lambda path, mod: path == "head")
    assert marker == {"group_size": 32, "bits": 4}
    assert isinstance(m.layers[0], nn.QuantizedLinear) and isinstance(m.layers[1], nn.QuantizedLinear)
    assert isinstance(m.embed, nn.QuantizedEmbedding)   # quantizable unless the family keeps it
    assert type(m.head) is nn.Linear                     # kept by the predicate
    assert type(m.odd) is nn.Linear                      # input size not a multiple of the group
    with pytest.raises(UsageError, match="--q-group-size 128"):
        quantize.quantize(_toy(), bits=4, group_size=128, keep=lambda path, mod: False)


def test_qwen3_keeps_its_embeddings_heads_and_projections():
    from ttscli.models.qwen3_tts.config import ModelArgs
    from ttscli.models.qwen3_tts.convert import keep
    from ttscli.models.qwen3_tts.model import Qwen3TTSModel

    model = Qwen3TTSModel(ModelArgs.from_file(FIX / "tiny-base" / "config.json"))
    quantize.quantize(model, bits=8, group_size=32, keep=keep)
    kinds = {name: type(m) for name, m in model.named_modules()}
    quantized = {n for n, k in kinds.items() if k in (nn.QuantizedLinear, nn.QuantizedEmbedding)}
    assert "talker.model.layers.0.self_attn.q_proj" in quantized
    assert "talker.code_predictor.model.layers.1.mlp.down_proj" in quantized
    for n in quantized:
        assert not any(k in n for k in ("embedding", "codec_head", "lm_head", "small_to_mtp_projection",
                                        "text_projection", "speaker_encoder")), n
    assert kinds["talker.codec_head"] is nn.Linear
    assert kinds["talker.model.codec_embedding"] is nn.Embedding
    assert not any(n.startswith("speaker_encoder") for n in quantized)


@pytest.mark.parametrize("bits", [4, 8])
def test_a_quantized_checkpoint_reads_back_within_the_quantization_error(tmp_path, bits):
    ref = _toy()
    original = {k: mx.array(v) for k, v in tree_flatten(ref.parameters())}
    marker = quantize.quantize(ref, bits=bits, group_size=32, keep=lambda path, mod: path == "head")
    mx.save_safetensors(str(tmp_path / "model.safetensors"), dict(tree_flatten(ref.parameters())))
    config = {"quantization": marker}

    fresh = _toy(seed=1)
    weights = read_safetensors(tmp_path / "model.safetensors")
    quantize.prepare(fresh, config, weights, "model.safetensors")
    load_strict(fresh, weights, source="model.safetensors")
    for name in ("layers.0", "layers.1"):
        layer = fresh.layers[int(name[-1])]
        w = mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=32, bits=bits)
        err = mx.abs(w - original[f"{name}.weight"]).reshape(w.shape[0], -1, 32)
        # within one step of its group's grid (MLX shifts the grid so that zero is exact, so the
        # bound is a step, not half), and half a step or less on average
        step = mx.abs(layer.scales)[..., None]
        assert mx.all(err <= step * (1 + 1e-4)).item(), name
        assert mx.mean(err / step).item() < 0.5, name
        assert mx.max(err).item() > 0  # it really was quantized
    assert mx.array_equal(fresh.head.weight, original["head.weight"]).item()
    ids = mx.array([[1, 5, 9]])
    assert mx.allclose(fresh(ids), ref(ids), atol=1e-5).item()


def test_a_foreign_quantized_checkpoint_is_refused_with_the_tensor_named(tmp_path):
    ref = _toy()
    quantize.quantize(ref, bits=4, group_size=32, keep=lambda path, mod: path == "embed")
    weights = dict(tree_flatten(ref.parameters()))
    with pytest.raises(CheckpointError) as e:
        quantize.prepare(_toy(), {}, weights, "x/model.safetensors")
    msg = str(e.value)
    assert msg.startswith("x/model.safetensors: head.weight (+2 more) is quantized") and "\n" not in msg
    with pytest.raises(CheckpointError, match="quantization"):
        quantize.prepare(_toy(), {"quantization": {"bits": 4}}, weights, "x/model.safetensors")


def test_qwen3_loader_reads_our_conversion_and_refuses_one_without_the_marker(tmp_path):
    from ttscli.models.qwen3_tts.convert import convert_mlx
    from ttscli.models.qwen3_tts.load import load_model

    src = tmp_path / "src"
    shutil.copytree(FIX / "tiny-customvoice", src)
    out = tmp_path / "q8"
    convert_mlx(None, src, out, quantize=True, q_bits=8, q_group_size=32, dtype="float32")
    model, _ = load_model(out, "float32")
    assert isinstance(model.talker.model.layers[0].mlp.gate_proj, nn.QuantizedLinear)

    cfg = json.loads((out / "config.json").read_text())
    del cfg["quantization"]
    (out / "config.json").write_text(json.dumps(cfg))
    refused = r"model\.safetensors: talker\..*\.weight \(\+\d+ more\) is quantized .* no \"quantization\""
    with pytest.raises(CheckpointError, match=refused):
        load_model(out, "float32")
