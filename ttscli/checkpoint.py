"""The strict weight check every loader runs: what is missing, unexpected or mis-shaped."""
from __future__ import annotations

from typing import Mapping, Sequence


def weight_problems(expected: Mapping[str, Sequence[int]], got: Mapping[str, Sequence[int]],
                    prefix: str = "", limit: int = 4) -> list[str]:
    """Phrases such as ``missing 2: a, b`` / ``mis-shaped 1: k [8, 8, 10] (expected [16, 8, 10])``
    comparing tensor names -> shapes; empty when every tensor fits. ``prefix`` is put before the
    names shown (the checkpoint's own spelling); at most ``limit`` names per kind, then a count."""
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    shaped = sorted(f"{prefix}{k} {list(got[k])} (expected {list(expected[k])})"
                    for k in set(expected) & set(got) if tuple(got[k]) != tuple(expected[k]))
    out = []
    for label, items in (("missing", [prefix + k for k in missing]),
                         ("unexpected", [prefix + k for k in unexpected]), ("mis-shaped", shaped)):
        if items:
            more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
            out.append(f"{label} {len(items)}: {', '.join(items[:limit])}{more}")
    return out


def shapes(arrays: Mapping) -> dict[str, tuple[int, ...]]:
    """Name -> shape of a dict of arrays (mlx or numpy)."""
    return {k: tuple(v.shape) for k, v in arrays.items()}
