"""models.toml (shipped) + user registry files -> ModelSpec."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ttscli.errors import ModelNotFoundError, UsageError
from ttscli.paths import config_dir

CAPABILITIES = ("speak", "clone", "voice_design", "instruct", "streaming")


@dataclass
class ModelSpec:
    id: str
    name: str
    family: str
    sample_rate: int
    implemented: bool = False
    aliases: list[str] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    backends: dict[str, list[str]] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    # request fields this model cannot do without, each with what the user should give, e.g.
    # {"instruct": "a description of the voice"}: refused before anything loads
    requires: dict[str, str] = field(default_factory=dict)
    license: str = ""
    license_notice: str | None = None
    origin: str = "builtin"

    @property
    def cache_id(self) -> str:
        """The name of this model's folders in ttscli's converted-weights cache: its id, or what
        the entry gives for a model named by a file (whose id is a path)."""
        return self.source.get("cache_id", self.id)

    def can(self, capability: str) -> bool:
        return bool(self.capabilities.get(capability, False))

    @property
    def voices(self) -> list[str]:
        return list(self.capabilities.get("voices", []))

    @property
    def languages(self) -> list[str]:
        return list(self.capabilities.get("languages", []))

    @property
    def default_voices(self) -> dict[str, str]:
        """The voice a request without --voice gets, from ``defaults``: ``voice`` (key "") and
        ``voice_<lang>`` where a language has a clearer one; empty where the entry names none."""
        d = self.defaults
        out = {"": str(d["voice"])} if isinstance(d.get("voice"), str) else {}
        out.update({k[len("voice_"):]: str(v) for k, v in d.items() if k.startswith("voice_") and isinstance(v, str)})
        return out

    @classmethod
    def from_table(cls, model_id: str, t: dict[str, Any], origin: str) -> "ModelSpec":
        if not isinstance(t, dict):
            raise UsageError(f"registry {origin}: model '{model_id}' must be a table ([models.\"{model_id}\"])")
        missing = [k for k in ("family", "sample_rate") if k not in t]
        if missing:
            raise UsageError(f"registry {origin}: model '{model_id}' lacks {', '.join(missing)}")
        sr = t["sample_rate"]
        if not isinstance(sr, int) or isinstance(sr, bool) or sr <= 0:
            raise UsageError(f"registry {origin}: model '{model_id}' has invalid sample_rate {sr!r}")
        _check_types(t, model_id, origin)
        return cls(
            id=model_id,
            name=t.get("name", model_id),
            family=t["family"],
            sample_rate=sr,
            implemented=bool(t.get("implemented", False)),
            aliases=list(t.get("aliases", [])),
            source=dict(t.get("source", {})),
            capabilities=dict(t.get("capabilities", {})),
            backends={k: list(v) for k, v in t.get("backends", {}).items()},
            defaults=dict(t.get("defaults", {})),
            requires=dict(t.get("requires", {})),
            license=t.get("license", ""),
            license_notice=t.get("license_notice"),
            origin=origin,
        )


# the type each optional field must have: a wrong one would otherwise surface as an "internal error"
_FIELD_TYPES = {"family": str, "name": str, "implemented": bool, "aliases": list, "source": dict,
                "capabilities": dict, "backends": dict, "defaults": dict, "requires": dict, "license": str,
                "license_notice": str}


def _check_types(t: dict[str, Any], model_id: str, origin: str) -> None:
    for key, kind in _FIELD_TYPES.items():
        if key in t and not isinstance(t[key], kind):
            raise UsageError(f"registry {origin}: model '{model_id}' field {key} must be a "
                             f"{kind.__name__.replace('dict', 'table').replace('str', 'string')}, not {t[key]!r}")
    bad = [a for a in t.get("aliases", []) if not isinstance(a, str)]
    bad += [k for k, v in t.get("backends", {}).items() if not isinstance(v, list)]
    bad += [k for k, v in t.get("requires", {}).items() if not isinstance(v, str)]
    if bad:
        raise UsageError(f"registry {origin}: model '{model_id}' has an invalid alias, backend list or "
                         f"requirement: {bad[0]!r}")


class Registry:
    def __init__(self, specs: dict[str, ModelSpec], default: str, default_clone: str | None = None):
        self.specs = specs
        self.default = default
        self.default_clone = default_clone

    def __iter__(self):
        return iter(self.specs.values())

    def resolve(self, name: str | None, model_dir: Path | None = None) -> ModelSpec:
        """Model id, alias (case-insensitive), a model a family knows by its files (a Piper voice
        ``PATH.onnx`` or ``piper:VOICE``: ``Family.named``) or None for the default. With
        ``model_dir``, the family may take the folder's own model instead of the entry's
        (``Family.in_folder``: ``--model-dir`` with any Piper voice)."""
        spec = self._lookup(self.default if name is None else name)
        if model_dir is not None:
            from ttscli.models import family_names, get_family

            if spec.family in family_names() and (in_folder := get_family(spec.family).in_folder) is not None:
                spec = self._remember(in_folder(spec, model_dir))
        return spec

    def _lookup(self, name: str) -> ModelSpec:
        if name in self.specs:
            return self.specs[name]
        low = name.lower()
        for spec in self.specs.values():
            if spec.id.lower() == low or low in (a.lower() for a in spec.aliases):
                return spec
        from ttscli.models import families

        for family in families():
            if family.named is not None and (spec := family.named(name)) is not None:
                return self._remember(spec)
        known = ", ".join(sorted(self.specs))
        guess = self.closest(name)
        hint = f"did you mean {guess}? " if guess else ""
        raise ModelNotFoundError(f"unknown model '{name}'; {hint}known models: {known} (see `ttscli models`; "
                                 "a Piper voice is also named by its PATH.onnx or piper:VOICE)")

    def _remember(self, spec: ModelSpec) -> ModelSpec:
        """Keep a voice named by path under its id, so that resolving the id again (the engine,
        a worker) finds the same entry."""
        self.specs.setdefault(spec.id, spec)
        return self.specs[spec.id]

    def closest(self, name: str) -> str | None:
        """The model id whose id or alias is spelt most like ``name`` (difflib's ratio of at least
        0.75: a typo or two, not another model's name), or None."""
        import difflib

        names = {n.lower(): spec.id for spec in self.specs.values() for n in (spec.id, *spec.aliases)}
        match = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.75)
        return names[match[0]] if match else None


def _parse(text: str, origin: str) -> tuple[dict[str, ModelSpec], dict[str, str]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"registry {origin} is not valid TOML: {e}") from None
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise UsageError(f"registry {origin}: [models] must be a table")
    specs = {mid: ModelSpec.from_table(mid, t, origin) for mid, t in models.items()}
    defaults = {k: data[k] for k in ("default", "default_clone") if isinstance(data.get(k), str)}
    return specs, defaults


def user_registry_files() -> list[Path]:
    """Files from $TTSCLI_REGISTRY (os.pathsep-separated) and ~/.config/ttscli/registry.d/*.toml."""
    files = []
    d = config_dir() / "registry.d"
    if d.is_dir():
        files += sorted(d.glob("*.toml"))
    env = os.environ.get("TTSCLI_REGISTRY")
    if env:
        files += [Path(p) for p in env.split(os.pathsep) if p]
    return files


def load_registry(extra: Iterable[Path] = ()) -> Registry:
    builtin = resources.files("ttscli").joinpath("models.toml").read_text(encoding="utf-8")
    specs, defaults = _parse(builtin, "builtin")
    for path in [*user_registry_files(), *extra]:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot read registry file {path}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise UsageError(f"registry file {path} is not UTF-8 text (byte {e.start}); give a TOML file") from None
        more, more_defaults = _parse(text, str(path))
        specs.update(more)
        defaults.update(more_defaults)
    for key, mid in defaults.items():
        if mid not in specs:
            raise UsageError(f"registry {key} model '{mid}' is not defined")
    return Registry(specs, defaults["default"], defaults.get("default_clone"))
