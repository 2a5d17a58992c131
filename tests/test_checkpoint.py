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
