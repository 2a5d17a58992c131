"""Which backend each component runs on, on this machine: :func:`resolve`, the one place.

A model's components are its registry entry's ``backends`` keys; its family declares, per
component, the backends and the measured default (:class:`ttscli.models.base.Component`). The
user asks with ``--backend COMPONENT=NAME`` (``LoadOptions.backends`` in the library); what is
not asked for gets the declared default, with the reason ``ttscli models MODEL`` shows.

A backend name may carry a variant after a dash: ``onnx-int8`` is the ``onnx`` backend at int8
(``onnx`` alone: int8, the default on CPU; ``onnx-f32`` / ``onnx-float32``, ``onnx-int4``).
The registry lists base names only.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from typing import Mapping

from ttscli.errors import BackendUnavailableError, UsageError
from ttscli.models.base import Component, Family
from ttscli.registry import ModelSpec

ONNX_VARIANTS = {"": "int8", "int8": "int8", "int4": "int4", "f32": "float32", "float32": "float32",
                 "fp32": "float32"}


def split_backend(name: str) -> tuple[str, str]:
    """``"onnx-int4"`` -> ``("onnx", "int4")``; ``"mlx"`` -> ``("mlx", "")``; an unknown ONNX
    variant is a UsageError."""
    base, _, var = name.lower().partition("-")
    if base == "onnx":
        if var not in ONNX_VARIANTS:
            raise UsageError(f"backend {name!r}: ONNX precision must be f32, int8 or int4 (e.g. onnx-int4)")
        return base, ONNX_VARIANTS[var]
    if var:
        raise UsageError(f"backend {name!r}: only onnx takes a precision suffix (onnx-f32, onnx-int8, onnx-int4)")
    return base, ""


def mlx_available() -> tuple[bool, str]:
    """(True, "") when MLX loads here, else (False, why): a missing backend wheel names what to install."""
    from ttscli import mlx_runtime

    try:
        import mlx.core as mx  # noqa: F401
    except Exception as e:  # pragma: no cover  # noqa: BLE001 - optional backend probe: mlx can fail to load in many ways
        if mlx_runtime.is_missing_backend(e):
            return False, str(mlx_runtime.unavailable(e))
        return False, f"mlx cannot be imported: {e}"
    return True, ""


def available(backend: str) -> tuple[bool, str]:
    """(True, "") when ``backend`` (a base name or ``onnx-<precision>``) can run here, else (False, why)."""
    base, _ = split_backend(backend)
    if base == "mlx":
        return mlx_available()
    if base == "coreml":
        from ttscli.backends.coreml import coreml_available

        return coreml_available()
    if base == "onnx":
        from ttscli.backends.onnx import onnx_available

        return onnx_available()
    return False, f"unknown backend {backend!r}"


def cpu_vendor() -> str:
    """The CPU's vendor string on Linux (``AuthenticAMD``, ``GenuineIntel``), else ""."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def mlx_on_gpu() -> bool:
    """Whether MLX's default device is a GPU (False where MLX cannot be imported)."""
    if not mlx_available()[0]:
        return False
    import mlx.core as mx

    return mx.default_device().type == mx.DeviceType.gpu


def this_machine() -> tuple[str, str]:
    """(platform, CPU vendor) as measured tables key them: ("linux", "AuthenticAMD"), ("darwin", "")."""
    plat = "linux" if sys.platform.startswith("linux") else sys.platform
    return plat, cpu_vendor() if plat == "linux" else ""


@dataclass(frozen=True)
class Choice:
    """Where one component runs, and why (shown by ``ttscli models MODEL``)."""

    backend: str
    why: str


# the environment variables that chose a component's backend before --backend; read for one release
DEPRECATED_ENV = {"TTSCLI_PIPER_BACKEND": "vits", "TTSCLI_KOKORO_BACKEND": "acoustic",
                  "TTSCLI_FLOW_BACKEND": "flow_estimator", "TTSCLI_HIFT_BACKEND": "vocoder"}
_warned: set[str] = set()


def deprecated_env_backends(components: Mapping[str, Component]) -> dict[str, tuple[str, str]]:
    """component -> (backend, "VAR=value") from the deprecated variables set for these components;
    each prints one deprecation line on stderr, once per process."""
    out = {}
    for var, component in DEPRECATED_ENV.items():
        value = os.environ.get(var, "").strip().lower()
        if not value or component not in components:
            continue
        if var not in _warned:
            _warned.add(var)
            sys.stderr.write(f"warning: {var} is deprecated and goes in the next release; "
                             f"use --backend {component}={value}\n")
            sys.stderr.flush()
        out[component] = (value, f"{var}={value}")
    return out


def parse_backend_options(values: list[str] | None) -> dict[str, str]:
    """``["code_decoder=onnx", "vits=mlx"]`` (repeated ``--backend``) -> a component map; a
    malformed or repeated entry is one UsageError line."""
    out: dict[str, str] = {}
    for item in values or []:
        component, sep, backend = item.partition("=")
        component, backend = component.strip().lower(), backend.strip().lower()
        if not sep or not component or not backend:
            raise UsageError(f"--backend {item!r}: give COMPONENT=BACKEND, e.g. code_decoder=onnx "
                             "(`ttscli models MODEL` lists the components)")
        if component in out and out[component] != backend:
            raise UsageError(f"--backend {component} given twice ({out[component]}, {backend}); give it once")
        out[component] = backend
    return out


def components_of(spec: ModelSpec, family: Family) -> dict[str, Component]:
    """The model's components (its registry ``backends`` keys), each with its family's declaration
    narrowed to the backends the registry lists for this model; an undeclared one runs on mlx."""
    out = {}
    for name, listed in spec.backends.items():
        declared = family.component(name) or Component(name, tuple(listed))
        out[name] = narrowed(declared, tuple(b for b in declared.backends if b in listed) or ("mlx",))
    return out


def narrowed(component: Component, backends: tuple[str, ...]) -> Component:
    """``component`` on ``backends`` only, its defaults too (a model whose registry entry lists
    fewer backends than its family, e.g. a multi-speaker Piper voice on onnx alone, never
    defaults to one it lacks)."""
    if backends == tuple(component.backends):
        return component
    def listed(name: str | None) -> bool:      # a default may name a precision: onnx-f32 is onnx
        return name is not None and split_backend(name)[0] in backends

    return replace(component, backends=backends,
                   default=component.default if listed(component.default) else backends[0],
                   measured={k: v for k, v in component.measured.items() if listed(v)},
                   on_gpu=component.on_gpu if listed(component.on_gpu) else None,
                   random_weights=component.random_weights if listed(component.random_weights) else None)


def check_asked(spec: ModelSpec, name: str, backend: str, label: str, components: Mapping[str, Component]) -> str:
    """``backend`` as asked for component ``name`` (``label`` names how, e.g. ``--backend
    vits=onnx``), checked against its declaration and this machine."""
    component = components.get(name)
    if component is None:
        have = ", ".join(components) or "none"
        raise UsageError(f"{label}: {spec.id} has no component {name!r} "
                         f"(its components: {have}; see `ttscli models {spec.id}`)")
    try:
        base, _ = split_backend(backend)
    except UsageError as e:
        raise UsageError(f"{label}: {e}") from None
    if base not in component.backends:
        raise UsageError(f"{label}: {spec.id}'s {component.name} runs on {', '.join(component.backends)}, "
                         f"not {backend!r}")
    if backend != base and not component.onnx_precision:
        raise UsageError(f"{label}: {spec.id}'s {component.name} takes no precision suffix; choose {base}")
    ok, why = available(backend)
    if not ok:
        raise BackendUnavailableError(f"{label}: {why}")
    return backend


def default_choice(component: Component, random_weights: bool = False) -> Choice:
    """Where ``component`` runs here when nothing asks: see :class:`~ttscli.models.base.Component`."""
    if random_weights and component.random_weights:
        return Choice(component.random_weights, "random weights run on " + component.random_weights)
    note = f" ({component.why})" if component.why else ""
    plat, vendor = this_machine()
    if component.on_gpu and mlx_on_gpu():
        pick, why = component.on_gpu, "MLX runs on the GPU here"
    elif (plat, vendor) in component.measured and vendor:
        pick, why = component.measured[(plat, vendor)], f"measured default on {plat}/{vendor}{note}"
    elif (plat, "") in component.measured:
        pick, why = component.measured[(plat, "")], f"default on {plat}{note}"
    else:   # a ``why`` without a measured table speaks of the default itself
        return Choice(component.default, "the default" + ("" if component.measured else note))
    if pick != component.default:
        ok, missing = available(pick)
        if not ok:
            return Choice(component.default, f"{pick} cannot run here ({missing})")
    return Choice(pick, why)


def follow(component: Component, leader: str) -> Choice:
    """A component that runs where ``leader``'s backend does, when it can, else on its default."""
    base = split_backend(leader)[0]
    if base in component.backends:
        return Choice(base, f"runs with the {component.follows}")
    return Choice(component.default, f"the default (the {component.follows} is on {leader})")


def resolve(spec: ModelSpec, family: Family, asked: Mapping[str, str] | None = None, *,
            random_weights: bool = False, labels: Mapping[str, str] | None = None) -> dict[str, Choice]:
    """Every component of ``spec``'s model -> where it runs and why: ``asked`` (checked: an unknown
    component, a backend it cannot run or one missing here is one line), else a deprecated
    environment variable, else :func:`default_choice`. ``labels`` names how each asked entry was
    given, for messages (default ``--backend COMPONENT=NAME``)."""
    components = components_of(spec, family)
    labels = dict(labels or {})
    given = {c: (b.strip().lower(), labels.get(c, f"--backend {c}={b}")) for c, b in (asked or {}).items()}
    for c, value in deprecated_env_backends(components).items():
        given.setdefault(c, value)
    out = {}
    for c, (backend, label) in given.items():
        out[c] = Choice(check_asked(spec, c, backend, label, components), f"asked: {label}")
    for c, comp in components.items():
        if c not in out and not comp.follows:
            out[c] = default_choice(comp, random_weights)
    for c, comp in components.items():
        if comp.follows:
            followed = follow(comp, out[comp.follows].backend if comp.follows in out else "mlx")
            if c in out and out[c].backend != followed.backend:
                raise UsageError(f"{given[c][1]}: {spec.id}'s {c} runs where its {comp.follows} does "
                                 f"({followed.backend} here); choose --backend {comp.follows}=...")
            out[c] = followed
    return {c: out[c] for c in components}
