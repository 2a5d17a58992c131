"""Model families. Each is a package ``ttscli.models.<name>`` whose ``family.py`` declares
``FAMILY`` (see :mod:`ttscli.models.base` for the contract)."""
from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from ttscli.errors import UsageError
from ttscli.models.base import Family


_REGISTERED: dict[str, Family] = {}


@lru_cache(maxsize=None)
def _shipped() -> tuple[str, ...]:
    import ttscli.models as pkg

    out = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.ispkg and importlib.util.find_spec(f"ttscli.models.{info.name}.family") is not None:
            out.append(info.name)
    return tuple(out)


def family_names() -> tuple[str, ...]:
    """The family packages shipped with ttscli (those with a family.py), and registered ones."""
    return tuple(sorted({*_shipped(), *_REGISTERED}))


def register_family(family: Family) -> None:
    """Make a family defined outside ttscli.models usable by registry entries naming it (an
    out-of-tree family, or a test's deliberately broken copy). Registering a name again replaces it."""
    if not isinstance(family, Family):
        raise TypeError("register_family takes a ttscli.models.base.Family")
    _REGISTERED[family.name] = family


def unregister_family(name: str) -> None:
    _REGISTERED.pop(name, None)


def get_family(name: str) -> Family:
    """The declaration of family ``name``; a UsageError when ttscli has no such family."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    return _shipped_family(name)


@lru_cache(maxsize=None)
def _shipped_family(name: str) -> Family:
    if name not in _shipped():
        raise UsageError(f"no model family '{name}' in this ttscli (it has: {', '.join(family_names())})")
    module = importlib.import_module(f"ttscli.models.{name}.family")
    fam = getattr(module, "FAMILY", None)
    if not isinstance(fam, Family) or fam.name != name:
        raise TypeError(f"ttscli.models.{name}.family must define FAMILY = Family(name={name!r}, ...)")
    return fam


def families() -> list[Family]:
    return [get_family(n) for n in family_names()]


def all_knobs() -> dict[str, list[tuple[str, object]]]:
    """knob name -> [(family, Knob)]: what the CLI offers as options."""
    out: dict[str, list] = {}
    for fam in families():
        for k in fam.knobs:
            out.setdefault(k.name, []).append((fam.name, k))
    return out


def family_of(spec) -> Family:
    """The family of a registry entry; a UsageError naming the registry file and entry when
    this ttscli has no such family (a typo in a user registry, or a newer registry)."""
    if spec.family not in family_names():
        raise UsageError(f"registry {spec.origin}: model '{spec.id}' names family '{spec.family}', which this "
                         f"ttscli does not have (it has: {', '.join(family_names())})")
    return get_family(spec.family)
