"""The one config reader: a dataclass built from a checkpoint's JSON (``config.json`` & co).

Every family's ``ModelArgs`` (and nested configs) inherits :class:`BaseArgs`, as mlx-lm's models
share one ``from_dict``: known fields are kept, unknown keys ignored (publishers add fields the
model never reads), a field whose type is itself a ``BaseArgs`` is read from its nested object,
and a value of the wrong type is a :class:`CheckpointError` naming the field and the file,
instead of a TypeError deep inside the model's constructor.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Mapping

from ttscli.errors import CheckpointError


@dataclasses.dataclass
class BaseArgs:
    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, source: str = "config.json", where: str = ""):
        """Build from a JSON object; ``source`` (the file) and ``where`` (the path of this object
        inside it, e.g. ``talker_config.``) name a bad field in the error."""
        if not isinstance(d, Mapping):
            raise CheckpointError(f"{source}: {where.rstrip('.') or 'the file'} should be an object, "
                                  f"got {_show(d)}")
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            name = where + f.name
            if f.name not in d:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise CheckpointError(f"{source}: {name} is missing")
                continue
            kwargs[f.name] = _read(d[f.name], hints[f.name], source, name)
        return cls(**kwargs)

    @classmethod
    def from_section(cls, cfg: Mapping[str, Any], section: str, top: tuple[str, ...] = (), *,
                     source: str = "config.json"):
        """From the object ``cfg[section]`` plus the fields named in ``top``, which the file keeps
        at its top level (e.g. a codec's sample rate beside its ``decoder_config``)."""
        if not isinstance(cfg, Mapping):
            raise CheckpointError(f"{source}: the file should hold an object, got {_show(cfg)}")
        hints = typing.get_type_hints(cls)
        extra = {k: _read(cfg[k], hints[k], source, k) for k in top if k in cfg}
        inner = cfg.get(section, {})
        if not isinstance(inner, Mapping):
            raise CheckpointError(f"{source}: {section} should be an object, got {_show(inner)}")
        return cls.from_dict({**inner, **extra}, source=source, where=section + ".")

    @classmethod
    def from_file(cls, path: Path):
        return cls.from_dict(read_json(path), source=str(path))


def read_json(path: Path) -> Any:
    """A checkpoint's JSON file; a missing or malformed one is one CheckpointError line."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing; pass the checkpoint folder in its published layout") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path} is not readable JSON ({e})") from None


def _read(value: Any, hint: Any, source: str, name: str) -> Any:
    nested = _nested_args(hint)
    if nested is not None and isinstance(value, Mapping):
        return nested.from_dict(value, source=source, where=name + ".")
    if not _fits(value, hint):
        raise CheckpointError(f"{source}: {name} should be {_type_name(hint)}, got {_show(value)}")
    # configs are small; a copy keeps the args independent of the dict they were read from
    return copy.deepcopy(value) if isinstance(value, (list, dict)) else value


def _nested_args(hint: Any) -> type[BaseArgs] | None:
    """The BaseArgs class a field holds (also through ``X | None``), else None."""
    for h in (hint, *typing.get_args(hint)):
        if isinstance(h, type) and issubclass(h, BaseArgs):
            return h
    return None


def _fits(value: Any, hint: Any) -> bool:
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # JSON true/false are bools in Python, and bool is an int subclass
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # JSON writes whole floats such as 1000000 as integers
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is list or origin is list:
        return isinstance(value, (list, tuple)) and (not args or all(_fits(v, args[0]) for v in value))
    if hint is dict or origin is dict:
        return isinstance(value, Mapping) and (not args or all(
            _fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items()))
    return isinstance(value, hint) if isinstance(hint, type) else True


def _type_name(hint: Any) -> str:
    if isinstance(hint, type) and not typing.get_args(hint):
        return "an object" if issubclass(hint, BaseArgs) else hint.__name__
    return str(hint).replace("typing.", "")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
