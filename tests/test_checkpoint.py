"""The strict weight check shared by every loader (ttscli/checkpoint.py)."""
from ttscli.checkpoint import weight_problems


def test_everything_fits():
    assert weight_problems({"a": (2, 3)}, {"a": [2, 3]}) == []


def test_each_kind_is_named_with_the_checkpoint_prefix():
    expected = {"a.weight": (4, 2), "b.bias": (4,), "c.weight": (16, 8, 10)}
    got = {"a.weight": (4, 2), "c.weight": (8, 8, 10), "x.extra": (1,)}
    assert weight_problems(expected, got, prefix="decoder.") == [
        "missing 1: decoder.b.bias",
        "unexpected 1: decoder.x.extra",
        "mis-shaped 1: decoder.c.weight [8, 8, 10] (expected [16, 8, 10])",
    ]


def test_long_lists_are_cut_with_a_count():
    missing = {f"w{i}": (1,) for i in range(7)}
    (phrase,) = weight_problems(missing, {}, limit=3)
    assert phrase == "missing 7: w0, w1, w2 (+4 more)"


# --- load_strict: the one loader (check -> cast -> load -> eval) ---------------------------------

import mlx.core as mx
import mlx.nn as nn
import pytest

from ttscli.checkpoint import load_strict
from ttscli.errors import CheckpointError, UsageError


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.norm = nn.RMSNorm(3)
        self.codebook = mx.zeros((5, 3))


def _weights(dtype=mx.float32):
    return {"proj.weight": mx.arange(12, dtype=dtype).reshape(3, 4) / 7, "proj.bias": mx.ones((3,), dtype),
            "norm.weight": mx.full((3,), 2.0, dtype), "codebook": mx.arange(15, dtype=dtype).reshape(5, 3) / 3}


def test_load_strict_loads_the_values_and_names_the_source_on_failure():
    m = load_strict(_Tiny(), _weights(), source="x.safetensors")
    assert mx.array_equal(m.proj.weight, _weights()["proj.weight"]).item()
    w = _weights()
    del w["norm.weight"]
    w["proj.weight"] = w["proj.weight"][:2]
    w["head.weight"] = mx.zeros((1,))
    with pytest.raises(CheckpointError) as e:
        load_strict(_Tiny(), w, source="x.safetensors", where="enc.", hint="re-download it")
    assert str(e.value) == ("x.safetensors: missing 1: enc.norm.weight; unexpected 1: enc.head.weight; "
                            "mis-shaped 1: enc.proj.weight [2, 4] (expected [3, 4]) (re-download it)")


def test_load_strict_leaves_the_module_untouched_when_it_refuses():
    m = _Tiny()
    before = mx.array(m.proj.weight)
    w = _weights()
    del w["proj.bias"]
    with pytest.raises(CheckpointError):
        load_strict(m, w, source="s")
    assert mx.array_equal(m.proj.weight, before).item()


def test_load_strict_casts_floating_tensors_and_keeps_what_the_predicate_names():
    m = load_strict(_Tiny(), _weights(mx.float32), dtype="bfloat16", keep_dtype=lambda k: k == "codebook", source="s")
    assert m.proj.weight.dtype == mx.bfloat16 and m.norm.weight.dtype == mx.bfloat16
    assert m.codebook.dtype == mx.float32
    m = load_strict(_Tiny(), _weights(mx.bfloat16), source="s")  # no dtype: the file's own
    assert m.proj.weight.dtype == mx.bfloat16
    with pytest.raises(UsageError, match="float32, float16, bfloat16"):
        load_strict(_Tiny(), _weights(), dtype="float64", source="s")


def test_load_strict_checks_the_checkpoint_spelling_then_sanitizes():
    # expected in the checkpoint's names/layout; sanitize maps them to the module's
    ckpt = {"model." + k: (v.T if k == "proj.weight" else v) for k, v in _weights().items()}
    expected = {k: tuple(v.shape) for k, v in ckpt.items()}

    def sanitize(w):
        return {k[len("model."):]: (v.T if k == "model.proj.weight" else v) for k, v in w.items()}

    m = load_strict(_Tiny(), ckpt, expected=expected, sanitize=sanitize, source="s")
    assert mx.array_equal(m.proj.weight, _weights()["proj.weight"]).item()
    bad = dict(ckpt, **{"model.proj.weight": _weights()["proj.weight"]})  # module layout, not the file's
    with pytest.raises(CheckpointError, match=r"model\.proj\.weight \[3, 4\] \(expected \[4, 3\]\)"):
        load_strict(_Tiny(), bad, expected=expected, sanitize=sanitize, source="s")
