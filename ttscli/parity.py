"""`ttscli parity`: numerical fidelity against goldens or another backend.

A family declares (``Family.parity_checks``, models/base.py)
    parity_checks(spec, checkpoint, *, golden: Path | None, against: str | None, frames: int,
                  backend: str | None) -> list[Check]
and the backends ``--against`` may name (``Family.parity_against``).
The goldens format of each family is documented in docs/parity.md.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path


from ttscli import hub
from ttscli.models import family_of
from ttscli.models.base import Check, cosine, max_abs, rel_l2
from ttscli.errors import NotImplementedModelError, UsageError
from ttscli.registry import Registry

__all__ = ["Check", "ParityRequest", "cosine", "max_abs", "rel_l2", "render", "run_parity"]


@dataclass
class ParityRequest:
    model: str | None = None
    golden: Path | None = None
    against: str | None = None
    frames: int = 20
    model_dir: Path | None = None
    backend: str | None = None


def run_parity(req: ParityRequest, registry: Registry, console=None) -> dict:
    spec = registry.resolve(req.model)
    if not spec.implemented:
        raise NotImplementedModelError(f"{spec.id} is not implemented yet")
    family = family_of(spec)
    fn = family.parity_checks
    if fn is None:
        raise UsageError(f"no parity checks exist for the {spec.family} family yet")
    if req.against is not None and req.against not in family.parity_against:
        raise UsageError(f"--against {req.against}: {spec.id} compares with "
                         f"{', '.join(family.parity_against) or 'goldens only (--golden FILE)'}")
    if req.golden is not None and not Path(req.golden).is_file():
        raise UsageError(f"--golden {req.golden} does not exist")
    checkpoint = hub.locate(spec, req.model_dir)
    checks = fn(spec, checkpoint, golden=req.golden, against=req.against, frames=req.frames, backend=req.backend)
    report = {
        "model": spec.id,
        "reference": str(req.golden) if req.golden else req.against,
        "checks": [dict(asdict(c), passed=c.passed) for c in checks],
        "passed": bool(checks) and all(c.passed for c in checks),
    }
    if console:
        console.print(render(report))
    return report


def _figure(v, op: str) -> str:
    if isinstance(v, float) and v.is_integer() and op == "==":
        return str(int(v))
    if not isinstance(v, float):
        return str(v)
    if op == ">=" and 0.999 < v < 1:
        return f"1 - {1 - v:.1e}"  # cosines: the distance from 1 is the information
    if v != 0 and (abs(v) < 1e-2 or abs(v) >= 1e4):
        return f"{v:.3e}"
    return f"{v:.6f}"


def render(report: dict):
    from rich.table import Table

    t = Table(title=f"ttscli parity {report['model']} vs {report['reference']}")
    for col in ("check", "figure", "threshold", "result", "detail"):
        t.add_column(col)
    for c in report["checks"]:
        fig = _figure(c["value"], c["op"])
        t.add_row(c["name"], fig, f"{c['op']} {c['threshold']:g}",
                  "[green]pass[/green]" if c["passed"] else "[red]FAIL[/red]", c.get("detail", ""))
    return t
