"""The family contract: what a model family provides and what the engine reads from it.

A family is a package ``ttscli.models.<name>`` (``<name>`` is the registry's ``family``
field) with a light module ``family.py`` that defines ``FAMILY = Family(...)``. Light means it
imports nothing heavy at module level (no mlx, no onnxruntime): the CLI reads every family's
knob declarations to build its options, and ``ttscli --help`` / ``ttscli models`` must stay fast
and work offline. Everything heavy is imported inside the hook functions.

What the engine calls, all through :class:`Family`:

- ``load(spec, checkpoint, options) -> Pipeline`` (required). ``checkpoint`` is the folder
  ``hub.locate`` found, or None with ``options.random_weights``.
- ``knobs``: the family's own generation settings (:class:`Knob`), validated by the engine
  before the pipeline sees them; unknown or out-of-range knobs are a UsageError.
- ``voices(spec, checkpoint) -> list[str]``: preset voices (default: the registry's list).
- ``convert[target](spec, checkpoint, out_dir, *, quantize, q_bits, q_group_size, dtype,
  capacity, progress)``: ``ttscli convert --to target`` writes into the empty ``out_dir``.
- ``bench_components(pipeline, bench_request) -> dict`` with ``bench_rows`` labelling the
  family's figures; ``peers[name](spec, checkpoint, text, repeats) -> dict`` for ``--peer``.
- ``parity_checks(spec, checkpoint, *, golden, against, frames, backend) -> list[Check]`` and
  ``parity_against``, the names ``--against`` accepts.
- ``bench_batch(pipeline, sizes, frames, text, seed, warmup) -> dict``: ``bench --batch``
  figures of a family whose pipelines generate rows (below); ``batches`` says that they may.
- ``components``: each component that can run on several backends, with its measured default
  (:class:`Component`); ``ttscli.backends.select.resolve`` turns them, the user's ``--backend``
  and this machine into one backend per component, handed to ``load`` in ``options.backends``.

A pipeline that can generate several requests as rows of one batch (continuous batching: one
forward per frame for all of them) returns a :class:`RowGenerator` from ``Pipeline.rows()``;
the engine (``ttscli.batching``) owns everything else: splitting text into chunks, admitting
rows when a slot is free, crossfading a request's chunks, streaming, cancelling.

What the engine reads from a pipeline is the :class:`Pipeline` base class below; every
family's pipeline subclasses it. What passes between them is contract too: a :class:`Request`
in (one text chunk of it per ``generate`` call, made by :func:`chunk_requests`) and
:class:`Stats` out, so a family needs nothing from the engine's modules.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence

from ttscli.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover - numpy only in annotations: `ttscli --help` reads this module
    import numpy as np

    from ttscli.registry import ModelSpec
    from ttscli.words import Word

COMMANDS = ("speak", "clone")
PREFILL_MODES = ("batched", "sequential")


@dataclass
class Request:
    """One synthesis request: the fields every family understands, plus the family's knobs.

    A family honours a subset of the common fields (``Family.honours`` and the model's registry
    capabilities); the engine (``ttscli.generate.check_request``) refuses the others, and
    refuses knobs the family does not declare, before any audio is made.
    """

    text: str
    voice: str | None = None                 # preset voice name, or a saved voice file (.safetensors)
    instruct: str | None = None              # style instruction / voice description
    language: str | None = None              # None: the model's default ("auto" where it has one)
    ref_audio: np.ndarray | None = None      # clone: mono float32 reference, at ref_sample_rate
    ref_sample_rate: int | None = None
    ref_text: str | None = None              # clone: transcript of the reference (in-context mode)
    save_voice: Path | None = None           # clone: store the voice prompt here
    seed: int | None = None
    speed: float = 1.0
    max_frames: int | None = None            # None: the model's default; reaching it is an error
    stream: bool = False
    first_chunk_frames: int | None = None    # None: the family's (Family.first_chunk_frames)
    chunk_frames: int = 25
    knobs: dict[str, Any] = field(default_factory=dict)      # family knobs (Knob below), by name
    ignore_eos: bool = False                 # bench at random weights: run max_frames frames, never stop
    timestamps: bool = False                 # the caller wants word timestamps (ttscli.generate.synthesize_words)
    # what the engine does to the text before chunking (ttscli.generate.plan); a family sees plain words
    normalize_text: bool = True              # read numbers, dates, money, ... out (ttscli.textnorm)
    ssml: bool = False                       # the text is SSML (ttscli.ssml); else [pause:S] markers only
    sentence_silence: float = 0.0            # seconds of silence after each sentence

    def for_chunk(self, text: str) -> "Request":
        return replace(self, text=text)


def chunk_requests(request: Request, chunks: list[str]) -> list[Request]:
    """One request per text chunk; seeds derive from the base seed so workers cannot change the audio.

    The engine's chunk scheduler and its row scheduler (``ttscli.batching``) both split requests
    with this, so a chunk gets the same seed whichever of them runs it."""
    out = []
    for i, text in enumerate(chunks):
        r = request.for_chunk(text)
        if request.seed is not None:
            r.seed = request.seed + i
        if i > 0:
            r.save_voice = None  # the voice prompt is stored once
        out.append(r)
    return out


@dataclass
class Stats:
    """Timings a pipeline records while generating (bench reads them). Seconds unless noted."""

    prefill_tokens: int = 0
    prefill_s: float = 0.0
    frame_s: list[float] = field(default_factory=list)       # one frame of a codec LM, all its helpers
    decoder_s: float = 0.0                   # speech decoder / vocoder time
    decoder_frames: int = 0
    frames: int = 0
    first_audio_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)      # family figures (numbers only reach bench)


@dataclass(eq=False)
class Row:
    """One chunk request generated as a row of a batch: the handle a :class:`RowGenerator`
    returns from ``start`` and the engine hands back to ``step``, ``take`` and ``drop``."""

    request: Request
    state: Any = None                        # the family's own: caches, key stream, decoder stream
    done: bool = False                       # generation ended (its stop, its limit or an error)
    error: BaseException | None = None       # why it ended, when that was a failure


class RowGenerator(Protocol):
    """Several chunk requests generated together, one frame per ``step`` for all of them.

    The engine calls ``start`` for a request when a slot is free (the request is checked, one
    text chunk, seeded by :func:`chunk_requests`); ``step(rows)`` with every started row that is
    neither done nor dropped, in any order: rows not yet stepped are prefilled first, then each
    row gains one frame (a row that reaches its stop or limit is marked ``done``, with ``error``
    on failure); ``take(row)`` returns the row's audio finished since the last ``take`` (None:
    none yet), all of it once the row is done; ``drop(row)`` ends a row early or releases a done
    one. Each row must equal the same request run alone through ``Pipeline.generate`` with the
    same seed, up to the rounding of batched matmuls: its own positions, sampling key stream,
    penalties and stop, and a streamed request's chunks of ``first_chunk_frames`` then
    ``chunk_frames``.
    """

    def start(self, request: Request) -> Row: ...

    def step(self, rows: Sequence[Row]) -> None: ...

    def take(self, row: Row) -> np.ndarray | None: ...

    def drop(self, row: Row) -> None: ...


# frames a request runs at random weights (bench, serve --random-weights) unless it sets
# max_frames: random weights never say stop, so every request is this long (4 s at 12.5 Hz)
RANDOM_WEIGHTS_FRAMES = 50


@dataclass
class LoadOptions:
    """How to build a pipeline. Component names are the registry's ``backends`` keys.

    ``backends`` holds what the caller asks for; :func:`ttscli.api.load` checks it and fills in
    every other component's default (:func:`ttscli.backends.select.resolve`), so a family's load
    hook sees one backend per component. A hook called directly sees "mlx" for a component left out.
    """

    dtype: str | None = None                 # "float32" | "float16" | "bfloat16"; None: the family default
    backends: dict[str, str] = field(default_factory=dict)   # component -> backend; missing: "mlx"
    random_weights: bool = False             # real dimensions, random weights (bench, contract test)
    prefill_mode: str = "batched"            # codec LMs: "sequential" prefills one position per call (bench)
    converted_dir: Path | None = None        # converted components (e.g. Core ML packages); None: ttscli's cache
    coreml_compute_units: str = "all"        # Core ML: all | cpu_only | cpu_and_gpu | cpu_and_ne

    def backend(self, component: str) -> str:
        return self.backends.get(component, "mlx")


@dataclass(frozen=True)
class Naming:
    """How an error message spells what the user set: the CLI's flags (``--noise-scale``) or the
    HTTP API's JSON fields (``noise_scale``), so that each reader sees the name they typed.

    ``fields`` maps a common request field (:data:`ttscli.generate.HONOURABLE`) to its spelling;
    ``see`` says where a model's settings are listed."""

    fields: Mapping[str, str]
    knob_prefix: str
    knob_sep: str
    see: str                                 # with {model}

    def field(self, name: str) -> str:
        return self.fields.get(name, self.knob(name))

    def knob(self, name: str) -> str:
        return self.knob_prefix + name.replace("_", self.knob_sep)

    def where(self, model: str) -> str:
        return self.see.format(model=model or "<model>")


CLI_NAMING = Naming(
    fields={"voice": "--voice", "instruct": "--instruct", "language": "--language", "speed": "--speed",
            "ref_audio": "--ref (voice cloning)", "ref_text": "--ref-text", "save_voice": "--save-voice",
            "max_frames": "--max-frames", "stream": "--stream", "seed": "--seed"},
    knob_prefix="--", knob_sep="-", see="`ttscli models {model}`")
API_NAMING = Naming(
    fields={"voice": "`voice`", "instruct": "`instructions`", "language": "`language`", "speed": "`speed`",
            "ref_audio": "`ref_audio` (voice cloning)", "ref_text": "`ref_text`", "save_voice": "`save_voice`",
            "max_frames": "`max_frames`", "stream": "`stream`", "seed": "`seed`"},
    knob_prefix="", knob_sep="_", see="GET /v1/models/{model}")


@dataclass(frozen=True)
class Knob:
    """A family-specific generation setting: ``--name-with-dashes VALUE`` on the command line,
    ``Request.knobs["name"]`` in the library.

    ``default`` is only documentation (the model's own default, shown in help and `ttscli
    models MODEL`); a knob the user did not give is absent from ``Request.knobs`` and the
    family applies its own default.
    """

    name: str
    type: type                               # float, int, bool or str
    help: str
    default: Any = None
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    commands: tuple[str, ...] = COMMANDS     # which CLI commands offer it
    # the value names a file on this machine: the CLI and the library take it, the server refuses it
    # (a client must never make the server read its files)
    local_file: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def describe(self) -> str:
        rng = ""
        if self.choices:
            rng = " (" + "|".join(self.choices) + ")"
        elif self.min is not None or self.max is not None:
            lo = "" if self.min is None else f"{self.min:g}"
            hi = "" if self.max is None else f"{self.max:g}"
            rng = f" [{lo}..{hi}]"
        dflt = "" if self.default is None else f", default {self.default}"
        return f"{self.type.__name__}{rng}{dflt}"

    def parse(self, value: Any, where: str = "", naming: Naming = CLI_NAMING) -> Any:
        """The value in this knob's type, or a UsageError naming the knob (as ``naming`` spells
        it) and its range."""
        what = f"{naming.knob(self.name)}{where}"
        if self.type is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise UsageError(f"{what} takes true or false, not {value!r}")
        try:
            if self.type is int and isinstance(value, float) and not value.is_integer():
                raise ValueError
            v = self.type(value)
        except (TypeError, ValueError):
            raise UsageError(f"{what} takes {'an' if self.type is int else 'a'} {self.type.__name__}, "
                             f"not {value!r}") from None
        if isinstance(v, float) and v != v:
            raise UsageError(f"{what} is not a number")
        if self.choices is not None and v not in self.choices:
            raise UsageError(f"{what} must be one of {', '.join(self.choices)}, not {v!r}")
        if self.min is not None and v < self.min or self.max is not None and v > self.max:
            raise UsageError(f"{what} must be in [{'' if self.min is None else f'{self.min:g}'}.."
                             f"{'' if self.max is None else f'{self.max:g}'}], got {v}")
        return v


@dataclass(frozen=True)
class Component:
    """A part of a family's models that can run on more than one backend, and where it runs by
    default (``--backend NAME=BACKEND`` chooses; ``ttscli models MODEL`` shows the default here).

    The default, first that applies: ``on_gpu`` when MLX's default device is a GPU (the ONNX graphs
    are CPU graphs); ``measured[(platform, cpu vendor)]``, then ``measured[(platform, "")]`` for
    any CPU of that platform (``"darwin"``, ``"linux"``; vendor as /proc/cpuinfo names it);
    else ``default``. A default that cannot run here (onnxruntime missing) falls back to
    ``default``. ``why`` says what the table rests on, in words a user reads in `ttscli models`.
    """

    name: str
    backends: tuple[str, ...] = ("mlx",)
    default: str = "mlx"
    measured: Mapping[tuple[str, str], str] = field(default_factory=dict)
    on_gpu: str | None = None
    why: str = ""
    # where random weights run when nothing is asked (None: as any other run); a backend whose
    # graphs are built from a checkpoint alone cannot take them
    random_weights: str | None = None
    # onnx takes a precision suffix here (onnx-f32, onnx-int8, onnx-int4): a graph of quantized weights
    onnx_precision: bool = False
    # a component that runs where another does, never chosen on its own: e.g. a code predictor that
    # goes to onnxruntime with the code decoder's graph
    follows: str | None = None


@dataclass(frozen=True)
class Family:
    """Everything the engine needs from a family (see the module docstring)."""

    name: str
    load: Callable[["ModelSpec", Path | None, LoadOptions], "Pipeline"]
    knobs: tuple[Knob, ...] = ()
    voices: Callable[["ModelSpec", Path | None], list[str]] | None = None
    convert: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    bench_components: Callable[..., dict[str, float]] | None = None
    # (figure key, row label, format), and "cuda" 4th for a row that means something only on CUDA
    bench_rows: tuple[tuple[str, ...], ...] = ()
    peers: Mapping[str, Callable[..., dict[str, float]]] = field(default_factory=dict)
    parity_checks: Callable[..., list] | None = None
    parity_against: tuple[str, ...] = ()
    # continuous batching: True when the family's pipelines may return a RowGenerator from
    # Pipeline.rows() (read before loading, e.g. by the Ray engine to size its calls)
    batches: bool = False
    # ttscli bench --batch: bench_batch(pipe, sizes, frames, text, seed, warmup) -> {variant: figures}
    bench_batch: Callable[..., dict[str, dict[str, float]]] | None = None
    # what the request may carry besides text, and which common fields the family honours
    honours: frozenset[str] = frozenset()    # of: voice, instruct, language, speed, ref_audio, stream,
    #                                          max_frames, save_voice (the engine refuses the rest)
    # --stream: frames in the first chunk when the request leaves it open; a decoder that needs
    # lookahead before any audio is final asks for more than a causal codec's 3
    first_chunk_frames: int = 3
    # clone: True when reference audio alone is a complete voice prompt and a transcript
    # (--ref-text) only changes the mode; False: the engine asks for --ref-text (or the family's
    # x_vector_only knob) before anything loads
    ref_text_optional: bool = False
    # --stream, in words, when the first audio does not wait for frames: what it waits for instead
    # (`ttscli models MODEL` shows it); empty: frames, for a family that honours stream, else the
    # first sentence chunk (a pipeline yields at least once a chunk)
    first_audio: str = ""
    # the components with more than one backend and their defaults (``ttscli.backends.select.resolve``);
    # a registry component not declared here runs on mlx
    components: tuple[Component, ...] = ()
    # ``ttscli convert --to coreml --capacity``: the code decoder's KV-cache positions when not given
    coreml_capacity: int | None = None
    # models named by their files rather than by a registry entry (a Piper voice ``PATH.onnx``):
    # named(name) -> an entry for ``-m NAME``, or None when the name is not one of this family's
    named: Callable[[str], "ModelSpec | None"] | None = None
    # ``--model-dir`` holding another model of the family than the entry's: in_folder(spec, dir) -> entry
    in_folder: Callable[["ModelSpec", Path], "ModelSpec"] | None = None

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.name == name), None)

    def first_chunk(self, requested: int | None) -> int:
        """Frames in a stream's first chunk: the request's, else the family's (at least one)."""
        return max(1, requested or self.first_chunk_frames)

    def knob(self, name: str) -> Knob | None:
        return next((k for k in self.knobs if k.name == name), None)

    def check_knobs(self, knobs: Mapping[str, Any], model: str = "",
                    naming: Naming = CLI_NAMING) -> dict[str, Any]:
        """Parse ``knobs`` against the declarations; an unknown knob is a UsageError."""
        out = {}
        who = model or f"the {self.name} family"
        for name, value in knobs.items():
            k = self.knob(name)
            if k is None:
                have = ", ".join(naming.knob(kn.name) for kn in self.knobs) or "none"
                raise UsageError(f"{who} has no setting {naming.knob(name)} "
                                 f"(its knobs: {have}; see {naming.where(model)})")
            out[name] = k.parse(value, naming=naming)
        return out


class Pipeline:
    """What the engine reads from a family's pipeline. Families subclass this.

    ``generate`` turns ONE text chunk (the engine has already split long text into sentence
    chunks of at most ``max_chunk_chars``) into float32 mono audio at ``sample_rate``. It yields
    more than once only when ``request.stream`` is set or the family streams naturally (Piper
    yields a sentence at a time). It fills ``self.stats`` as it goes (bench reads it) and raises
    ``ttscli.errors`` classes for anything the user must hear about.
    """

    sample_rate: int
    max_chunk_chars: int = 400
    # True only when chunks of one request may run on several threads at once (per-request state
    # only, and a backend that allows concurrent evaluation). MLX does not.
    concurrent_safe: bool = False
    # True when each generation keeps its mutable state (KV caches, stream decoders, random keys)
    # in its own generator, never on the pipeline, so that several generations may take turns on
    # one thread (the server interleaves requests chunk by chunk). Memos keyed by their inputs (a
    # voice cache) and shared ``stats`` (bench reads them for one generation at a time) are fine.
    independent_generations: bool = False
    # clone: the rate the engine resamples reference audio to (None: the family resamples itself)
    ref_sample_rate: int | None = None

    def __init__(self) -> None:
        self.stats: Stats = Stats()
        self.backends: dict[str, str] = {}   # component -> backend in use, e.g. {"code_decoder": "mlx"}
        self.spec: ModelSpec | None = None   # set by ttscli.api.load

    # True when ``generate_words`` takes word timestamps from the model's own durations; the
    # engine aligns the audio of other pipelines with a forced aligner (ttscli.words)
    word_durations: bool = False

    def generate(self, request: Request) -> Iterator[np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def generate_words(self, request: Request) -> Iterator[tuple[np.ndarray, list[Word]]]:
        """``generate``'s audio, the same samples, each piece with the input words it speaks
        (:class:`ttscli.words.Word`, seconds from the piece's start). Only where ``word_durations``."""
        raise NotImplementedError(f"{type(self).__name__} has no word durations")

    def clear_cache(self) -> None:
        """Called after each text chunk; a family that keeps per-chunk buffers drops them here."""

    def rows(self) -> "RowGenerator | None":
        """A fresh :class:`RowGenerator` over this pipeline (continuous batching), or None when
        this pipeline (its family, or the backends it was loaded with) generates one request at
        a time."""
        return None

    def reset_stats(self) -> Stats:
        self.stats = Stats()
        return self.stats


def read_golden_npz(path: Path, required: Sequence[str]) -> dict:
    """A goldens file's arrays by key (never unpickled), each of ``required`` present, else one line."""
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            g = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: not a readable .npz of arrays ({e})") from None
    missing = [k for k in required if k not in g]
    if missing:
        raise UsageError(f"{path}: missing {', '.join(missing)} (format: docs/parity.md)")
    return g


def golden_only(model: str, checkpoint, golden, against, backend) -> None:
    """Refuse, in one line each, what a parity check against upstream goldens alone on MLX cannot
    do: ``--against``, no ``--golden``, another backend, no checkpoint to load."""
    if against is not None or golden is None:
        raise UsageError(f"{model} parity compares with upstream goldens only: --golden FILE.npz "
                         "(format: docs/parity.md)")
    if backend not in (None, "mlx"):
        raise UsageError(f"{model} runs on mlx only (asked for {backend})")
    if checkpoint is None:
        raise UsageError(f"{model} parity needs the checkpoint the goldens came from (--model-dir)")


@dataclass
class Check:
    """One figure of ``parity_checks``: ``value`` against ``threshold`` by ``op``; the command
    layer (ttscli/parity.py) prints and judges them."""

    name: str
    value: float
    threshold: float
    op: str            # ">=" (similarity), "<=" (error) or "==" (exact count of matches)
    detail: str = ""

    @property
    def passed(self) -> bool:
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return False
        return {">=": self.value >= self.threshold, "<=": self.value <= self.threshold,
                "==": self.value == self.threshold}[self.op]


def cosine(a, b) -> float:
    """Cosine similarity of two arrays, flattened (NaN when either is all zeros)."""
    import numpy as np  # here, not at import: `ttscli --help` reads this module

    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    den = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / den) if den else float("nan")


def max_abs(a, b) -> float:
    """The largest absolute difference (inf when the shapes differ)."""
    import numpy as np  # here, not at import: `ttscli --help` reads this module

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        return float("inf")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def rel_l2(a, b) -> float:
    """||a - b|| / ||b|| (b is the reference)."""
    import numpy as np  # here, not at import: `ttscli --help` reads this module

    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if a.shape != b.shape:
        return float("inf")
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / den) if den else float(np.linalg.norm(a))


def sampling_knobs(prefix: str = "", what: str = "", defaults: Mapping[str, Any] | None = None,
                   names: tuple[str, ...] = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                                             "do_sample")) -> tuple[Knob, ...]:
    """The token-sampling knobs of a codec LM (``prefix`` for a second sampler, e.g. a code
    predictor's ``subtalker_``), in the order the samplers apply them."""
    d = dict(defaults or {})
    table = {
        "temperature": Knob("temperature", float, "Sampling temperature (0: greedy).", min=0.0, max=100.0),
        "top_k": Knob("top_k", int, "Keep the k most likely tokens (0: off).", min=0),
        "top_p": Knob("top_p", float, "Nucleus sampling: keep tokens up to this probability mass (1: off).",
                      min=1e-6, max=1.0),
        "min_p": Knob("min_p", float, "Drop tokens below this fraction of the top probability (0: off).",
                      min=0.0, max=0.999),
        "repetition_penalty": Knob("repetition_penalty", float, "Penalty on tokens already generated (1: off).",
                                   min=1e-3, max=100.0),
        "do_sample": Knob("do_sample", bool, "Sample (false: greedy decoding)."),
    }
    out = []
    for n in names:
        k = table[n]
        help_ = f"{k.help[:-1]}; {what}." if what else k.help
        out.append(Knob(prefix + k.name, k.type, help_, d.get(prefix + k.name), k.min, k.max, k.choices, k.commands))
    return tuple(out)


def hook(target: str) -> Callable[..., Any]:
    """A Family hook that imports its module only when called: ``hook("ttscli.models.piper.load:load_pipeline")``.
    family.py stays light (the CLI reads every family's declaration at start-up)."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ValueError(f"hook target {target!r} is not 'package.module:function'")

    def call(*args, **kwargs):
        from importlib import import_module

        return getattr(import_module(module), attr)(*args, **kwargs)

    call.__name__ = call.__qualname__ = attr
    call.__doc__ = f"{target} (imported on first call)"
    return call


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` re-exporting ``name -> submodule`` lazily, so importing a family's
    package does not import its heavy modules."""

    def __getattr__(name: str):
        if name in exports:
            from importlib import import_module

            return getattr(import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def run_peer_script(peer: str, python: str, script: Path, args: dict, timeout: float) -> dict:
    """A bench peer that runs in another Python (upstream's code and its own dependencies):
    ``python script`` with ``args`` as JSON on stdin; the last stdout line is its figures as a JSON
    object. A run that cannot start, times out, fails or prints no figures is one TTSError naming
    ``--peer PEER``."""
    import json
    import subprocess

    from ttscli.errors import TTSError

    try:
        p = subprocess.run([python, str(script)], input=json.dumps(args).encode(), capture_output=True,
                           timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TTSError(f"--peer {peer}: {python} {Path(script).name} did not finish ({e})") from None
    if p.returncode != 0:
        said = (p.stderr.decode("utf-8", "replace").strip().splitlines() or ["nothing on stderr"])[-1]
        raise TTSError(f"--peer {peer} failed (exit {p.returncode}): {said}")
    try:
        return json.loads(p.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TTSError(f"--peer {peer} printed no figures") from None
