"""`ttscli bench`: load time, first audio, prefill, per-frame latency, real-time factor, memory.

Generic figures come from running the pipeline like a user would (and from the `Stats` it
fills); a family adds its own component timings (``Family.bench_components``, labelled by
``Family.bench_rows``) and peers timed on the same text in the same run (``Family.peers``).
"""
from __future__ import annotations

import platform
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ttscli import __version__, hub
from ttscli.api import load
from ttscli.errors import NotImplementedModelError, TTSError, UsageError
from ttscli.generate import Request, Stats, synthesize
from ttscli.models import family_of
from ttscli.models.base import PREFILL_MODES, RANDOM_WEIGHTS_FRAMES, LoadOptions
from ttscli.registry import Registry

DEFAULT_TEXT = (
    "The quick brown fox jumps over the lazy dog. On-device speech synthesis has to be fast, "
    "faithful and pleasant to use."
)


@dataclass
class BenchRequest:
    model: str | None = None
    random_weights: bool = False
    text: str | None = None
    repeats: int = 3
    warmup: int = 1
    backends: list[str] = field(default_factory=lambda: ["mlx"])   # []: the model's default backend
    component: str | None = None             # whose backends ``backends`` compares (None: switched_component)
    fixed_backends: dict[str, str] = field(default_factory=dict)   # other components, one backend each
    prefill_modes: list[str] = field(default_factory=lambda: ["batched"])
    peer: str | None = None
    stream: bool = False
    max_frames: int | None = None
    prompt_tokens: int = 200
    model_dir: Path | None = None
    dtype: str | None = None
    plot: Path | None = None
    seed: int = 0
    ignore_eos: bool | None = None           # time exactly max_frames frames (None: with random weights)
    quality: bool = False                    # add WER/CER and DNSMOS (ttscli.eval.quality_figures)
    batch: list[int] = field(default_factory=list)  # --batch: rows generated at once, side by side
    workers: int = 1                         # --workers: chunks at once (where the pipeline allows it)
    ref: Path | None = None                  # --ref: reference audio, for models that clone (a Base model)
    ref_text: str | None = None              # --ref-text: its transcript
    verbose: bool = False                    # the table lists every figure, internal ones too (as the JSON)


@dataclass(frozen=True)
class Reference:
    """The voice a clone model is benched with: the recording at its own rate, and its transcript."""

    audio: np.ndarray
    sample_rate: int
    text: str | None


def environment() -> dict:
    import mlx.core as mx

    from ttscli import _blas

    return {
        "ttscli": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "mlx": getattr(mx, "__version__", "?"),
        "device": str(mx.default_device()),
        "cuda": bool(mx.cuda.is_available()),
        "blas": _blas.name(),
        "cpu_count": __import__("os").cpu_count(),
    }


def rss_peak_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1024 / 1024 if sys.platform == "darwin" else r / 1024


def pct(xs, q):
    return float(np.percentile(np.asarray(xs) * 1e3, q)) if len(xs) else None


def switched_component(spec, req: BenchRequest | None = None) -> str | None:
    """The component whose backends a run compares: the one ``--backend C=A,B`` names, else the
    code decoder, else the model's one component with several backends."""
    if req is not None and req.component:
        return req.component
    if "code_decoder" in spec.backends:
        return "code_decoder"
    several = [c for c, b in spec.backends.items() if len(b) > 1]
    return several[0] if len(several) == 1 else None


def run_once(pipe, request: Request, workers: int = 1) -> dict:
    """One full synthesis; figures from the wall clock and the pipeline's Stats."""
    from ttscli.generate import effective_workers

    pipe.reset_stats()
    t0 = time.perf_counter()
    first = None
    n = 0
    for chunk in synthesize(pipe, request, workers=effective_workers(pipe, workers)[0]):
        if first is None and len(chunk):
            first = time.perf_counter() - t0
        n += len(chunk)
    total = time.perf_counter() - t0
    s: Stats = pipe.stats
    audio_s = n / pipe.sample_rate
    out = {
        "total_s": total,
        "audio_s": audio_s,
        "rtf": total / audio_s if audio_s else None,
        "first_audio_s": first,
    }
    if s.frames:
        out.update({
            "frames": s.frames,
            "frames_per_s": s.frames / total,
            "frame_ms_p50": pct(s.frame_s, 50),
            "frame_ms_p95": pct(s.frame_s, 95),
            "frame_s": list(s.frame_s),
        })
    if s.decoder_frames:
        out["decoder_ms_per_frame"] = s.decoder_s / s.decoder_frames * 1e3
    if s.prefill_tokens and s.prefill_s:
        out["prefill_tokens"] = s.prefill_tokens
        out["prefill_tokens_per_s"] = s.prefill_tokens / s.prefill_s
    for k, v in s.extra.items():
        if isinstance(v, (int, float)):
            out.setdefault(k, v)      # a family's extra never overrides the measured figures
    return out


def _median_run(runs: list[dict]) -> dict:
    """Median of each numeric figure over repeats (frame timings from the median-time run)."""
    keys = {k for r in runs for k, v in r.items() if isinstance(v, (int, float)) and v is not None}
    med = {k: float(np.median([r[k] for r in runs if r.get(k) is not None])) for k in keys}
    by_time = sorted(runs, key=lambda r: r["total_s"])[len(runs) // 2]
    if "frame_s" in by_time:
        med["frame_s"] = by_time["frame_s"]
    return med


def run_variant(spec, req: BenchRequest, backend: str, prefill_mode: str, text: str, registry,
                ref: Reference | None = None) -> dict:
    import mlx.core as mx

    mx.reset_peak_memory()
    component = switched_component(spec, req)
    backends = {**req.fixed_backends, **({component: backend} if component and backend else {})}
    options = LoadOptions(dtype=req.dtype, backends=backends, random_weights=req.random_weights,
                          prefill_mode=prefill_mode)
    t0 = time.perf_counter()
    pipe = load(spec.id, model_dir=req.model_dir, registry=registry, options=options)
    load_s = time.perf_counter() - t0
    family = family_of(spec)
    frames = "max_frames" in family.honours
    # random weights never say stop: time a fixed number of frames
    fixed = RANDOM_WEIGHTS_FRAMES if req.random_weights else None
    request = Request(text=text, seed=req.seed, stream=req.stream,
                      max_frames=(req.max_frames or fixed) if frames else None,
                      ignore_eos=frames and (req.random_weights if req.ignore_eos is None else req.ignore_eos))
    if ref is not None:
        from ttscli.audio import resample

        rate = pipe.ref_sample_rate or ref.sample_rate
        request.ref_audio, request.ref_sample_rate = resample(ref.audio, ref.sample_rate, rate), rate
        request.ref_text = ref.text
    for _ in range(req.warmup):
        run_once(pipe, request, req.workers)
    runs = [run_once(pipe, request, req.workers) for _ in range(req.repeats)]
    fig = _median_run(runs)
    if req.quality:     # one more run, scored as `ttscli eval` scores a line
        from ttscli.eval import quality_figures

        audio = np.concatenate(list(synthesize(pipe, request)))
        fig.update({k: v for k, v in quality_figures(audio, pipe.sample_rate, text, request.language).items()
                    if k != "transcript"})
    fig["load_s"] = load_s
    fig["backend"] = pipe.backends.get(component, "mlx") if component else "mlx"
    from ttscli.generate import effective_workers

    fig["workers"] = effective_workers(pipe, req.workers)[0]
    if family.bench_components:
        fig.update(family.bench_components(pipe, req))
    fig["mlx_peak_mb"] = mx.get_peak_memory() / 2**20
    fig["rss_peak_mb"] = rss_peak_mb()
    return fig


def run_bench(req: BenchRequest, registry: Registry, console=None) -> dict:
    spec = registry.resolve(req.model)
    if not spec.implemented:
        raise NotImplementedModelError(f"{spec.id} is not implemented yet, so it cannot be benchmarked")
    family = family_of(spec)
    text = req.text or DEFAULT_TEXT
    for m in req.prefill_modes:
        if m not in PREFILL_MODES:
            raise UsageError(f"--prefill-mode {m}: choose {' or '.join(PREFILL_MODES)}")
    if len(req.prefill_modes) > 1 and "code_decoder" not in spec.backends:
        raise UsageError(f"{spec.id} has no code decoder to prefill; drop --prefill-mode")
    if req.max_frames is not None and "max_frames" not in family.honours:
        raise UsageError(f"{spec.id} has no frame limit; drop --max-frames")
    if req.stream and "stream" not in family.honours:
        raise UsageError(f"{spec.id} cannot honour --stream; drop it")
    if req.plot:
        check_plot(spec, family, req)
    ref = reference(spec, req)
    check_backends(spec, family, req)
    peer_fn = family.peers.get(req.peer) if req.peer else None
    if req.peer and peer_fn is None:              # refused before the variants' long runs
        have = ", ".join(family.peers) or "none"
        raise UsageError(f"--peer {req.peer}: the {spec.family} family compares with: {have}")
    if req.batch:
        return bench_batches(spec, req, text, registry, console)
    variants = {}
    for b in req.backends or [None]:     # None: what the model loads by default (named after it)
        for m in req.prefill_modes:
            name = b or "default"
            name = name if len(req.prefill_modes) == 1 else f"{name}/{m}"
            if console:
                console.print(f"[dim]bench {spec.id} [{name}] …[/dim]")
            fig = run_variant(spec, req, b, m, text, registry, ref)
            used = fig.pop("backend")
            variants[name.replace("default", used, 1) if b is None else name] = fig
    if peer_fn is not None:
        variants[req.peer] = peer_fn(spec, peer_checkpoint(spec, req), text, req.repeats)
    report = {
        "model": spec.id,
        "random_weights": req.random_weights,
        "text_chars": len(text),
        "repeats": req.repeats,
        "dtype": req.dtype or "default",
        "environment": environment(),
        "variants": {k: {kk: vv for kk, vv in v.items() if kk != "frame_s"} for k, v in variants.items()},
        "ratios": ratios(variants),
        "rows": [list(r) for r in family.bench_rows],
    }
    if console:
        console.print(render(report, verbose=req.verbose))
    if req.plot:
        plot_frames(variants, req.plot, spec.id)
    return report


def check_plot(spec, family, req: BenchRequest) -> None:
    """--plot draws per-frame latency: refused, before anything runs, where no frame is timed
    (a model that makes whole sentences, or --batch, which times batched steps instead)."""
    from ttscli.outfile import check_writable

    if "max_frames" not in family.honours:
        raise UsageError(f"--plot draws per-frame latency, and {spec.id} makes whole sentences, not frames one by "
                         "one: drop --plot")
    if req.batch:
        raise UsageError("--plot draws the per-frame latency of single runs: drop it with --batch")
    check_writable(req.plot, "--plot")


def reference(spec, req: BenchRequest) -> Reference | None:
    """--ref and --ref-text, read and checked as `ttscli clone` does, before anything loads."""
    if req.ref is None:
        if req.ref_text is not None:
            raise UsageError("--ref-text goes with --ref (the reference recording)")
        return None
    if not spec.can("clone"):
        raise UsageError(f"{spec.id} cannot clone voices; drop --ref")
    from ttscli.generate import needs_ref_text
    from ttscli.models import family_of

    if req.ref_text is None and needs_ref_text(family_of(spec), {}):
        raise UsageError("give --ref-text (the reference transcript) with --ref")
    if req.peer or req.batch:
        raise UsageError(f"--ref is for our own runs; {'--peer' if req.peer else '--batch'} would time rows "
                         "without it: drop one")
    from ttscli.audio import read_reference
    from ttscli.text import check_text

    text = None if req.ref_text is None else check_text(req.ref_text, "--ref-text")
    audio, rate = read_reference(req.ref, max_seconds=float(spec.defaults.get("max_ref_seconds", 30.0)))
    return Reference(audio, rate, text)


def peer_checkpoint(spec, req: BenchRequest) -> Path | None:
    """The weights a peer runs: the model's, located as a run would; None with --random-weights
    where none are on this machine (a peer built at random weights, as ours is, needs none, and
    one that does says so itself)."""
    if req.random_weights and req.model_dir is None and not hub.is_local(spec):
        return None
    return hub.locate(spec, req.model_dir)


def check_backends(spec, family, req: BenchRequest) -> None:
    """Every variant's backends, checked before anything loads (one line for a bad one)."""
    from ttscli.backends.select import resolve

    component = switched_component(spec, req)
    flag = f"--backend {component}=" if req.component else "--code-decoder-backend "
    if component is None:
        if any(b != "mlx" for b in req.backends):
            raise UsageError(f"{spec.id} has no code decoder nor one component with several backends; "
                             "name the component: --backend COMPONENT=A,B (`ttscli models MODEL` lists them)")
        resolve(spec, family, req.fixed_backends, random_weights=req.random_weights)
        return
    for b in req.backends or [None]:
        asked = {**req.fixed_backends, **({component: b} if b else {})}
        resolve(spec, family, asked, random_weights=req.random_weights,
                labels={component: flag + b} if b else None)


LOWER_IS_BETTER = ("rtf", "total_s", "first_audio_s", "frame_ms_p50", "decoder_ms_per_frame", "prefill_ms", "load_s")


def lower_is_better(key: str) -> bool:
    """Times: the generic ones above, and every family figure in ms or s."""
    if key in ("audio_s",) or key.endswith("_per_s"):
        return False
    return key in LOWER_IS_BETTER or key.endswith(("_ms", "_s"))


def ratios(variants: dict[str, dict]) -> dict:
    """Speed-up of every variant over the first, per figure (>1: faster than the first)."""
    names = list(variants)
    if len(names) < 2:
        return {}
    base = variants[names[0]]
    out = {}
    for name in names[1:]:
        v = variants[name]
        out[f"{name} vs {names[0]}"] = {
            k: base[k] / v[k] for k in base
            if lower_is_better(k) and isinstance(base[k], (int, float)) and isinstance(v.get(k), (int, float))
            and base[k] and v[k]
        }
    return out


ROWS = [
    ("load_s", "load (s)", "{:.2f}"),
    ("first_audio_s", "first audio (s)", "{:.3f}"),
    ("prefill_ms", "prefill of the prompt (ms)", "{:.1f}"),
    ("prefill_tokens_per_s", "prefill (tokens/s)", "{:.0f}"),
    ("prefill_tokens", "prefill length (tokens)", "{:.0f}"),
    ("frame_ms_p50", "per frame, p50 (ms)", "{:.2f}"),
    ("frame_ms_p95", "per frame, p95 (ms)", "{:.2f}"),
    ("decoder_ms_per_frame", "decoder (ms/frame)", "{:.2f}"),
    ("frames_per_s", "frames/s", "{:.1f}"),
    ("audio_s", "audio (s)", "{:.2f}"),
    ("total_s", "synthesis (s)", "{:.3f}"),
    ("rtf", "real-time factor", "{:.3f}"),
    ("wer", "WER", "{:.3f}"),
    ("cer", "CER", "{:.3f}"),
    ("dnsmos_ovrl", "DNSMOS overall", "{:.2f}"),
    ("mlx_peak_mb", "MLX peak (MB)", "{:.0f}"),
    ("rss_peak_mb", "RSS peak (MB)", "{:.0f}"),
]
# the default table: what a user compares (the rest, a family's internal figures included, with
# --verbose and in --json); quality figures only appear when --quality measured them
SUMMARY = ("load_s", "first_audio_s", "frame_ms_p50", "rtf", "wer", "cer", "dnsmos_ovrl", "mlx_peak_mb",
           "rss_peak_mb")


def applies(row: tuple, variants: dict, environment: dict) -> bool:
    """Whether a row means something on this machine and run: measured in some variant, MLX's
    peak only where MLX held memory, a row a family marks ``cuda`` (its 4th field) only where
    MLX runs on CUDA."""
    key = row[0]
    values = [v[key] for v in variants.values() if isinstance(v.get(key), (int, float))]
    if not values:
        return False
    if key == "mlx_peak_mb":
        return any(values)
    return not (len(row) > 3 and row[3] == "cuda" and not environment.get("cuda"))


def render(report: dict, verbose: bool = False, summary: tuple[str, ...] = SUMMARY):
    """The figures as a table: the ``summary`` rows, or every row with ``verbose``."""
    from rich.table import Table

    variants = report["variants"]
    names = list(variants)
    t = Table(title=f"ttscli bench {report['model']}" + (" (random weights)" if report["random_weights"] else ""),
              caption="real-time factor = synthesis time / audio duration (lower is faster); "
                      "ratio = first column's time / this column's (>1: faster); "
                      f"{report['environment']['device']}, BLAS {report['environment']['blas'].split()[0]}"
                      + ("" if verbose else "; -v for every figure"))
    t.add_column("figure")
    for n in names:
        t.add_column(n, justify="right")
    if len(names) > 1:
        for n in names[1:]:
            t.add_column(f"ratio {n}", justify="right")
    family_rows = [tuple(r) for r in report.get("rows", [])]
    rows = ROWS[:5] + family_rows + ROWS[5:]      # the family's figures after the prefill rows
    if verbose:
        rows += [(k, k, "{:.4g}") for k in sorted({k for v in variants.values() for k in v}
                                                  - {r[0] for r in rows} - {"frames"})]
    else:
        rows = [r for r in rows if r[0] in summary]
    for key, label, fmt, *_ in (r for r in rows if applies(r, variants, report["environment"])):
        cells = [fmt.format(variants[n][key]) if isinstance(variants[n].get(key), (int, float)) else "-" for n in names]
        for n in names[1:]:
            r = report["ratios"].get(f"{n} vs {names[0]}", {}).get(key)
            cells.append(f"{r:.2f}x" if r else "")
        t.add_row(label, *cells)
    return t


def plot_frames(variants: dict, path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'ttscli[plot]'") from None
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, v in variants.items():
        if v.get("frame_s"):
            ax.plot(np.asarray(v["frame_s"]) * 1e3, label=name)
    ax.set_xlabel("frame")
    ax.set_ylabel("ms")
    ax.set_title(f"{title}: per-frame latency")
    ax.legend()
    fig.tight_layout()
    import io

    from ttscli.outfile import write_bytes

    image = io.BytesIO()
    try:
        fig.savefig(image, format=Path(path).suffix.lstrip(".").lower() or "png")
    except ValueError as e:     # a suffix matplotlib has no writer for
        raise UsageError(f"--plot {path}: {e}") from None
    finally:
        plt.close(fig)
    write_bytes(path, image.getvalue(), "--plot")


BATCH_ROWS = (("step_ms_p50", "batched frame step, p50 (ms)", "{:.1f}"),
              ("frame_ms_per_row", "per row (ms/frame)", "{:.1f}"),
              ("audio_s_per_s", "audio s per wall s", "{:.3f}"),
              ("speedup_vs_first", "audio s/s vs first size", "{:.2f}x"))
BATCH_SUMMARY = (*(r[0] for r in BATCH_ROWS), "mlx_peak_mb")


def bench_batches(spec, req: BenchRequest, text: str, registry, console=None) -> dict:
    """--batch 1,4,16: the family's batched frames (``Family.bench_batch``) side by side."""
    import mlx.core as mx

    bench_batch = family_of(spec).bench_batch
    if bench_batch is None:
        raise UsageError(f"{spec.id} has no batched generation; drop --batch")
    if any(b < 1 for b in req.batch):
        raise UsageError("--batch sizes must be at least 1")
    component = switched_component(spec, req)
    backends = {**req.fixed_backends, **({component: req.backends[0]} if component and req.backends else {})}
    pipe = load(spec.id, model_dir=req.model_dir, registry=registry,
                options=LoadOptions(dtype=req.dtype, backends=backends, random_weights=req.random_weights))
    variants = bench_batch(pipe, req.batch, req.max_frames or 20, text, req.seed, req.warmup)
    for v in variants.values():
        v["mlx_peak_mb"] = mx.get_peak_memory() / 2**20
    report = {"model": spec.id, "random_weights": req.random_weights, "text_chars": len(text),
              "repeats": 1, "dtype": req.dtype or "default", "environment": environment(),
              "variants": variants, "ratios": {}, "rows": [list(r) for r in BATCH_ROWS]}
    if console:
        console.print(render(report, verbose=req.verbose, summary=BATCH_SUMMARY))
    return report



# ---- cold start: whole processes ----------------------------------------------------------------

COLD_TEXT = "Hello."
COLD_SIDES = ("ttscli --help", "ttscli speak", "piper")


@dataclass
class ColdRequest:
    """`ttscli bench --cold`: whole `ttscli` and `piper` processes, timed from start to exit."""

    model: str | None = None                 # a Piper voice (None: the registry default, the embedded one)
    text: str = COLD_TEXT
    runs: int = 5                            # timed runs of each side
    warmup: int = 1                          # untimed runs of each side first (page cache, converted files)
    model_dir: Path | None = None
    registry_files: list[Path] = field(default_factory=list)
    timeout_s: float = 300.0                 # one process at most; past it the bench stops with an error


@dataclass(frozen=True)
class ColdSide:
    """One side: its command line, its stdin, and the file a finished run must have written."""

    argv: list[str]
    stdin: bytes | None = None
    writes: Path | None = None


def console_script(name: str, install: str) -> str:
    """The `name` executable of this interpreter's environment (else on $PATH)."""
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return str(beside)
    import shutil

    found = shutil.which(name)
    if found is None:
        raise UsageError(f"--cold runs `{name}`, which is not installed: {install}")
    return found


def cold_sides(spec, req: ColdRequest, out_dir: Path) -> dict[str, ColdSide]:
    """`ttscli --help`, a one-line `ttscli speak` and `piper` on the same voice and text."""
    from ttscli.models.piper.load import find_onnx

    ttscli = console_script("ttscli", "pip install -e .")
    piper = console_script("piper", "pip install piper-tts")
    extra = [a for f in req.registry_files for a in ("--registry", str(f))]
    if req.model_dir is not None:
        extra += ["--model-dir", str(req.model_dir)]
    onnx = find_onnx(hub.locate(spec, req.model_dir))
    return {
        "ttscli --help": ColdSide([ttscli, "--help"]),
        "ttscli speak": ColdSide([ttscli, "speak", req.text, "-m", spec.id, "-o", str(out_dir / "ttscli.wav"), *extra],
                                 writes=out_dir / "ttscli.wav"),
        "piper": ColdSide([piper, "-m", str(onnx), "-f", str(out_dir / "piper.wav")], stdin=req.text.encode(),
                          writes=out_dir / "piper.wav"),
    }


def time_process(name: str, side: ColdSide, timeout_s: float) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of ``side``, from start to exit."""
    import subprocess

    if side.writes is not None:
        side.writes.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(side.argv, input=side.stdin, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise TTSError(f"--cold: {name} ran past {timeout_s:g} s") from None
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        said = (p.stderr.decode("utf-8", "replace").strip().splitlines() or ["nothing on stderr"])[-1]
        raise TTSError(f"--cold: {name} failed (exit {p.returncode}): {said}")
    if side.writes is not None and not (side.writes.is_file() and side.writes.stat().st_size > 44):
        raise TTSError(f"--cold: {name} exited 0 but wrote no audio to {side.writes}")
    if side.writes is None and not p.stdout.strip():
        raise TTSError(f"--cold: {name} printed nothing")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def spread(xs: list[float]) -> dict:
    return {"median_s": float(np.median(xs)), "min_s": min(xs), "max_s": max(xs)}


def run_cold(req: ColdRequest, registry: Registry, console=None) -> dict:
    """Each side's runs in turn, the order alternating from one round to the next, so load
    that comes and goes on the machine falls on both sides alike."""
    import os
    import shlex
    import tempfile

    spec = registry.resolve(req.model)
    if spec.family != "piper":
        raise UsageError(f"--cold compares with piper-tts, which runs Piper voices; {spec.id} is a {spec.family} model")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ttscli-cold-") as tmp:
        sides = cold_sides(spec, req, Path(tmp))
        wall = {n: [] for n in sides}
        cpu = {n: [] for n in sides}
        for i in range(req.warmup + req.runs):
            order = list(sides) if i % 2 == 0 else list(reversed(sides))
            if console:
                step = f"warm-up {i + 1}" if i < req.warmup else f"run {i - req.warmup + 1} of {req.runs}"
                console.print(f"[dim]bench --cold: {step} …[/dim]")
            for name in order:
                w, c = time_process(name, sides[name], req.timeout_s)
                if i >= req.warmup:
                    wall[name].append(w)
                    cpu[name].append(c)
    report = {
        "model": spec.id,
        "text": req.text,
        "runs": req.runs,
        "warmup": req.warmup,
        "commands": {n: shlex.join(s.argv) for n, s in sides.items()},
        "sides": {n: {**spread(wall[n]), "cpu_median_s": float(np.median(cpu[n])), "wall_s": wall[n],
                      "cpu_s": cpu[n]} for n in sides},
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
        "environment": {"ttscli": __version__, "python": platform.python_version(), "platform": platform.platform(),
                        "cpu_count": os.cpu_count()},
    }
    speak, piper = report["sides"]["ttscli speak"], report["sides"]["piper"]
    report["speak_vs_piper"] = {"wall": speak["median_s"] / piper["median_s"],
                                "cpu": speak["cpu_median_s"] / piper["cpu_median_s"]}
    if console:
        console.print(render_cold(report))
    return report


def render_cold(report: dict):
    from rich.table import Table

    ratio = report["speak_vs_piper"]
    t = Table(title=f"ttscli bench --cold {report['model']}: {report['runs']} runs each, alternating",
              caption=f"ttscli speak / piper (medians): {ratio['wall']:.2f}x wall, {ratio['cpu']:.2f}x CPU; "
                      "load average {:.2f} before, {:.2f} after".format(report["load_before"][0],
                                                                         report["load_after"][0]))
    for col in ("command", "median (s)", "min (s)", "max (s)", "CPU median (s)"):
        t.add_column(col, justify="left" if col == "command" else "right")
    for name, s in report["sides"].items():
        t.add_row(name, *(f"{s[k]:.3f}" for k in ("median_s", "min_s", "max_s", "cpu_median_s")))
    return t
