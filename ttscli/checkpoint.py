"""The one strict loader: every checkpoint tensor named and shaped as the module expects, or a
CheckpointError naming what is missing, unexpected or mis-shaped; then cast, load and evaluate."""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

from ttscli.dtypes import to_dtype
from ttscli.errors import CheckpointError

# the two spellings of a weight-normed tensor's (g, v): torch.nn.utils.weight_norm's and
# torch.nn.utils.parametrizations.weight_norm's
_WEIGHT_NORM = ((".weight_g", ".weight_v"),
                (".parametrizations.weight.original0", ".parametrizations.weight.original1"))


def fold_weight_norm(weights: Mapping) -> dict:
    """Every weight-normed pair ``X.weight_g``/``X.weight_v`` (or the parametrization's
    ``original0``/``original1``) becomes ``X.weight = g v / ||v||``, the norm over every dim but
    the first (``weight_norm(dim=0)``, convs, transposed convs and linears alike); other tensors
    are kept. Folded once at load, so inference pays nothing for the reparametrisation. The
    result keeps ``v``'s dtype; numpy and MLX arrays are both accepted."""
    import mlx.core as mx

    gs = {g for g, _ in _WEIGHT_NORM}
    out = {}
    for k, v in weights.items():
        pair = next(((g, vs) for g, vs in _WEIGHT_NORM if k.endswith(vs)), None)
        if pair is not None:
            base = k[: -len(pair[1])]
            if base + pair[0] not in weights:
                raise CheckpointError(f"{k} has no {base + pair[0]} (a weight-normed tensor needs both halves)")
            g = mx.array(weights[base + pair[0]]).astype(mx.float32)
            v = mx.array(v)
            v32 = v.astype(mx.float32)
            norm = mx.sqrt(mx.sum(v32 * v32, axis=tuple(range(1, v.ndim)), keepdims=True))
            out[base + ".weight"] = (g * v32 / norm).astype(v.dtype)
        elif not k.endswith(tuple(gs)):
            out[k] = v
        else:
            g = next(g for g in gs if k.endswith(g))
            if k[: -len(g)] + dict(_WEIGHT_NORM)[g] not in weights:
                raise CheckpointError(f"{k} has no {k[: -len(g)] + dict(_WEIGHT_NORM)[g]} (a weight-normed tensor "
                                      "needs both halves)")
    return out


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


def load_strict(module, weights: Mapping, *, source: str, where: str = "", dtype=None,
                keep_dtype: Callable[[str], bool] | None = None, expected: Mapping | None = None,
                sanitize: Callable[[dict], dict] | None = None, hint: str = ""):
    """Check ``weights`` against the module, cast them, load them, evaluate them; returns the module.

    ``weights`` (name -> mx.array) is compared by name and shape with ``expected`` (default: the
    module's own parameters); a missing, unexpected or mis-shaped tensor is a CheckpointError
    naming it as ``where + name``, with ``source`` (the file) in front and ``hint`` (what to do)
    after. ``sanitize`` then maps checkpoint names/layouts to the module's, when ``expected`` is
    in the checkpoint's spelling. Floating tensors are cast to ``dtype`` (a name or mx.Dtype;
    None keeps the file's dtype) unless ``keep_dtype(name)`` says that one keeps its own.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten

    if expected is None:
        expected = shapes(dict(tree_flatten(module.parameters())))
    problems = weight_problems(expected, shapes(weights), where)
    if problems:
        raise CheckpointError(f"{source}: " + "; ".join(problems) + (f" ({hint})" if hint else ""))
    weights = sanitize(dict(weights)) if sanitize is not None else dict(weights)
    if dtype is not None:
        dt = to_dtype(dtype)
        weights = {k: v.astype(dt) if mx.issubdtype(v.dtype, mx.floating) and not (keep_dtype and keep_dtype(k))
                   else v for k, v in weights.items()}
    module.load_weights(list(weights.items()), strict=True)
    mx.eval(module.parameters())
    return module


def read_safetensors(path) -> dict:
    """name -> mx.array of one safetensors file; an unreadable file is one CheckpointError line."""
    import mlx.core as mx

    try:
        return mx.load(str(path))
    except Exception as e:  # noqa: BLE001  (mlx raises plain RuntimeError/ValueError on a corrupt file)
        raise CheckpointError(f"{path}: cannot read ({e})") from None


def read_component(folder, prefix: str, others: tuple[str, ...] | None = None) -> tuple[dict, str]:
    """The ``prefix*`` tensors of a folder's ``model*.safetensors`` with the prefix taken off, and
    how to name their source. ``others``: the only other prefixes allowed there (None: any)."""
    from pathlib import Path

    files = sorted(Path(folder).glob("model*.safetensors"))
    if not files:
        raise CheckpointError(f"no model*.safetensors in {folder}")
    weights = {}
    for f in files:
        for k, v in read_safetensors(f).items():
            if k.startswith(prefix):
                weights[k[len(prefix):]] = v
            elif others is not None and not k.startswith(others):
                raise CheckpointError(f"{f}: unexpected tensor {k} (expected only {', '.join((prefix, *others))}*)")
    return weights, str(files[0] if len(files) == 1 else Path(folder) / "model*.safetensors")
