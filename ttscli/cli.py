"""The `ttscli` command line: each command parses, builds a request and calls the library."""
from __future__ import annotations

import functools
import inspect
import sys
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from typer.core import TyperGroup
from typer.models import CommandInfo

from ttscli import __version__
from ttscli.audio_formats import FORMATS as AUDIO_FORMATS
from ttscli.errors import Interrupted, TTSError, UsageError
from ttscli.serve import HTTPOptions

err = None  # rich's Console on stderr: stderr_console() makes it at first use


def stderr_console():
    """rich's Console on stderr, made at first use: `ttscli --help` does not import rich.console."""
    global err
    if err is None:
        from rich.console import Console

        err = Console(stderr=True, highlight=False)
    return err


class LazyCommands(MutableMapping):
    """The root group's commands by name, in the order registered. A command's click object is
    built from its typer registration (typer reading the signature; for speak, clone and eval the
    model families' knobs) when it is first looked up: to run it, show its help or document it.
    Listing the names (the top-level help, typer's did-you-mean) builds none."""

    def __init__(self, registered: dict, build):
        self.entries, self.build = dict(registered), build  # name -> CommandInfo, then the command

    def __getitem__(self, name: str):
        entry = self.entries[name]
        if isinstance(entry, CommandInfo):
            entry = self.entries[name] = self.build(entry)
        return entry

    def __setitem__(self, name: str, command) -> None:
        self.entries[name] = command

    def __delitem__(self, name: str) -> None:
        del self.entries[name]

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


class LazyGroup(TyperGroup):
    """The root command group. Its help, the list of commands, comes from click's formatter, and
    each command's line from its registration where it is not built yet (:class:`LazyCommands`):
    typer's rich help imports rich's markdown, traceback and syntax modules (markdown-it, pygments,
    attrs), about half of what `ttscli --help` cost with it. Each command's own help stays typer's."""

    def list_commands(self, ctx) -> list:
        return list(self.commands)  # the names only (typer's reads every value, building each)

    def format_help(self, ctx, formatter) -> None:
        super(TyperGroup, self).format_help(ctx, formatter)  # click's, not typer's rich one

    def format_commands(self, ctx, formatter) -> None:
        """Each command's name and the first paragraph of its help."""
        entries = self.commands.entries if isinstance(self.commands, LazyCommands) else self.commands
        rows = []
        for name, entry in entries.items():  # a CommandInfo or a click command: the same fields
            if not entry.hidden:
                text = entry.short_help or entry.help or inspect.getdoc(entry.callback) or ""
                rows.append((name, plain_markup(inspect.cleandoc(text).split("\n\n")[0])))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def plain_markup(text: str) -> str:
    """Rich markup (``[bold]``, ``\\[eval]``) as the plain text a terminal shows; text without a
    bracket has none, and rich's parser is not imported for it."""
    if "[" not in text:
        return text
    from rich.text import Text

    return Text.from_markup(text).plain


app = typer.Typer(
    cls=LazyGroup,
    name="ttscli",
    help="Run open neural text-to-speech models on-device with MLX and Core ML.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class State:
    quiet = False
    verbose = False
    debug = False


def note(msg: str) -> None:
    if not State.quiet:
        stderr_console().print(msg, markup=False)


class Backend(str, Enum):
    mlx = "mlx"
    coreml = "coreml"
    onnx = "onnx"            # onnxruntime, int8 (the CPU default); or a precision:
    onnx_f32 = "onnx-f32"
    onnx_int8 = "onnx-int8"
    onnx_int4 = "onnx-int4"


# ---- shared options --------------------------------------------------------------------------

Model = typer.Option(None, "-m", "--model", help="Model id or alias (see `ttscli models`), a Piper voice "
                     "PATH.onnx (its .onnx.json beside it), or piper:VOICE from the Hugging Face cache.")
ModelDir = typer.Option(None, "--model-dir", help="Use a local copy of the checkpoint in DIR (for Piper: any one "
                        "voice's .onnx and .onnx.json).", file_okay=False)
Registry = typer.Option(None, "--registry", help="Extra registry TOML file (repeatable).", exists=False)
Output = typer.Option(None, "-o", "--output",
                      help="Audio file (.wav .flac .mp3 .opus .ogg .aac .m4a), or - for WAV on stdout.")
Quiet = typer.Option(False, "-q", "--quiet", help="Print nothing but errors.")
Verbose = typer.Option(False, "-v", "--verbose", help="Print timings and settings.")
Debug = typer.Option(False, "--debug", help="Show tracebacks on errors.")
CodeDecoderBackend = typer.Option(
    None, "--code-decoder-backend", case_sensitive=False,
    help="The same as --backend code_decoder=NAME: the model's language model on mlx, coreml, or onnx "
         "(int8; onnx-f32, onnx-int4)."
)
BackendChoice = typer.Option(
    None, "--backend", metavar="COMPONENT=NAME",
    help="Where a component of the model runs, e.g. code_decoder=onnx-int4 (repeatable). `ttscli models MODEL` "
         "lists its components, their backends and the default here.")
# generation options shared by speak and clone
Format = typer.Option(None, "--format", help="wav, flac, mp3, opus, ogg (Opus), aac (ADTS), m4a, or pcm "
                                             "(raw s16le); must match -o's extension.")
SampleRate = typer.Option(None, "--sample-rate", min=8000, max=48000, show_default=False,
                          help="Resample -o's audio to HZ (8000 to 48000; default: the model's rate).")
Play = typer.Option(False, "--play", help="Play through the default output device.")
Language = typer.Option(None, "--language", help="Language (default: auto).")
Seed = typer.Option(None, "--seed", min=0, max=2**32 - 1, help="Random seed (0 to 4294967295) for reproducible output.")
MaxFrames = typer.Option(None, "--max-frames", min=1, help="Frame limit per chunk; reaching it is an error.")
Stream = typer.Option(False, "--stream", help="Emit audio while generating.")
FirstChunkFrames = typer.Option(None, "--first-chunk-frames", min=1, show_default=False,
                                help="Frames before the first streamed audio (default: the model's; "
                                     "`ttscli models MODEL` shows it).")
ChunkFrames = typer.Option(25, "--chunk-frames", min=1, help="Frames per streamed chunk after the first.")
Workers = typer.Option(1, "--workers", "--concurrent-worker-count", min=1, help="Chunks generated at once.")
Dtype = typer.Option(None, "--dtype", help="float32, float16 or bfloat16.")
Timestamps = typer.Option(None, "--timestamps", metavar="FILE.json",
                          help="Write each word's start and end (seconds) as JSON: from the model's durations "
                               "where it has them (Piper, Kokoro), else from a forced aligner on the audio "
                               "(pocketsphinx for English, faster-whisper otherwise; the eval extra).")
Subtitles = typer.Option(None, "--subtitles", metavar="FILE.srt|FILE.vtt",
                         help="Write subtitles of the spoken words: SubRip or WebVTT, by the suffix.")
Ssml = typer.Option(False, "--ssml", help="The text is SSML: <speak>, <p>, <s>, <break>, <say-as>, <sub>, "
                    "<prosody rate> (any other element is an error).")
NormalizeText = typer.Option(True, "--normalize-text/--no-normalize-text",
                             help="Read numbers, money, dates, times, phone numbers, units and abbreviations out "
                                  "as words (English) before the model sees the text.")
SentenceSilence = typer.Option(0.0, "--sentence-silence", min=0.0, max=10.0,
                               help="Seconds of silence after each sentence (a \\[pause:S] marker "
                                    "in the text pauses too).")


# --stream-input: stands in for the text still to come when the other fields are checked, before
# the model loads (each sentence is checked again as it comes)
KNOB_PANEL = "Model knobs (each model takes its own: `ttscli models MODEL`)"


class WithKnobs:
    """``fn`` as a command that takes every family's knobs for ``command`` as options (``--name VALUE``;
    ``--name/--no-name`` for booleans) and gets the ones given as ``knobs``. The family of the chosen
    model validates them (models/base.py Knob): a knob it does not declare is an error.

    The knobs are looked up (which imports every model family) when typer first reads the signature,
    that is when this command runs or shows its help: listing the commands (`ttscli --help`) never does."""

    def __init__(self, fn, command: str):
        self.fn, self.command = fn, command
        self.__name__, self.__qualname__, self.__module__ = fn.__name__, fn.__qualname__, fn.__module__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn  # typing.get_type_hints resolves the string annotations in fn's module

    @functools.cached_property
    def declared(self) -> dict:
        """{parameter name: (the first family's Knob, the families that declare it)} for this command."""
        from ttscli.models import all_knobs

        declared = {}
        for name, owners in all_knobs().items():
            ks = [k for _, k in owners if self.command in k.commands]
            if ks:
                declared[name] = (ks[0], sorted({fam for fam, k in owners if self.command in k.commands}))
        return declared

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        sig = inspect.signature(self.fn)
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in sig.parameters.values() if p.name != "knobs"]
        extra = []
        for name, (k, fams) in sorted(self.declared.items()):
            flag = k.flag + (f"/--no-{k.flag[2:]}" if k.type is bool else "")
            help_ = f"{k.help} ({', '.join(fams)})"
            extra.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[k.type],
                                           default=typer.Option(None, flag, help=help_, rich_help_panel=KNOB_PANEL,
                                                                show_default=False)))
        return sig.replace(parameters=params + extra)

    @property
    def __signature__(self) -> inspect.Signature:
        return self.signature

    @property
    def __annotations__(self) -> dict:
        return {p.name: p.annotation for p in self.signature.parameters.values()}

    def __call__(self, **kw):
        given = {n: kw.pop(n, None) for n in self.declared}
        return self.fn(**kw, knobs={n: v for n, v in given.items() if v is not None})


def with_knobs(command: str):
    """Decorate a command function as :class:`WithKnobs` for ``command``'s knobs."""
    return functools.partial(WithKnobs, command=command)


def print_json(obj) -> None:
    """``--json``: ``obj`` on stdout, indented."""
    import json

    typer.echo(json.dumps(obj, indent=2))


def set_flags(quiet: bool, verbose: bool, debug: bool) -> None:
    import logging

    State.quiet, State.verbose, State.debug = quiet, verbose and not quiet, debug
    level = logging.DEBUG if debug else logging.INFO if State.verbose else logging.ERROR
    logging.basicConfig(level=level, format="%(name)s: %(message)s", force=True)
    # coremltools warns at import that its runtime is absent off macOS: noise, not news
    logging.getLogger("coremltools").setLevel(logging.DEBUG if debug else logging.ERROR)


def registry_from(files: Optional[List[Path]]):
    from ttscli.registry import load_registry

    return load_registry(files or [])


def read_text(text: Optional[str], file: Optional[Path], what: str = "text") -> str:
    import os
    import stat

    from ttscli.text import check_text, decode_text, read_bounded

    if text is not None and file is not None:
        raise UsageError("give the text either as an argument or with --file, not both")
    if file is not None:
        try:
            with open(file, "rb") as f:
                st = os.fstat(f.fileno())
                data = read_bounded(f, what, size=st.st_size if stat.S_ISREG(st.st_mode) else None)
        except OSError as e:
            raise UsageError(f"cannot read --file {file}: {e.strerror}") from None
        return check_text(decode_text(data, what), what)
    if text is None:
        raise UsageError(f"no {what}: pass it as an argument, - for stdin, or --file PATH")
    if text == "-":
        return check_text(decode_text(read_bounded(sys.stdin.buffer, what), what), what)
    # argv arrives with invalid bytes as surrogate escapes; check_text rejects them
    return check_text(text, what)


def stream_text(text: Optional[str], file: Optional[Path]):
    """--stream-input: the text's deltas as they arrive, from stdin (-) or --file (a pipe, a
    FIFO or a file), read by :func:`ttscli.stream_input.read_deltas`. A --file opens when the
    first text is wanted: a FIFO's open waits for its writer, and the model loads meanwhile."""
    import os

    from ttscli.stream_input import read_deltas

    if text is not None and file is not None:
        raise UsageError("give the text either as - (stdin) or with --file, not both")
    if file is None and text != "-":
        raise UsageError("--stream-input reads - (stdin) or --file PATH, not text given as an argument")
    if file is None:
        return read_deltas(sys.stdin.buffer.fileno(), "stdin")
    if not os.path.exists(file):
        raise UsageError(f"cannot read --file {file}: No such file or directory")

    def from_file():
        try:
            fd = os.open(file, os.O_RDONLY)
        except OSError as e:
            raise UsageError(f"cannot read --file {file}: {e.strerror}") from None
        try:
            yield from read_deltas(fd, f"--file {file}")
        finally:
            os.close(fd)

    return from_file()


def default_output(output: Optional[str], play: bool) -> Optional[str]:
    """No -o and no --play: WAV to stdout when it is a pipe, else play."""
    if output is not None or play:
        return output
    if not sys.stdout.isatty():
        return "-"
    return None


def progress_callback(total_hint: str):
    if State.quiet or not stderr_console().is_terminal:
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    # the count shows once the first chunk reports the total (before it: the bar pulses, no "0/None")
    prog = Progress(TextColumn(total_hint), BarColumn(), TextColumn("{task.fields[count]}"),
                    TimeElapsedColumn(), console=stderr_console(), transient=True)
    task = prog.add_task(total_hint, total=None, count="")

    def cb(done: int, total: int):
        prog.update(task, completed=done, total=total, count=f"{done}/{total} chunks")

    return prog, cb


def word_files(timestamps: Optional[str], subtitles: Optional[str]) -> dict:
    """{path: (format, option)} of --timestamps and --subtitles, each checked writable before any work."""
    from ttscli.outfile import check_writable
    from ttscli.words import format_of

    files = {}
    for path, what in ((timestamps, "--timestamps"), (subtitles, "--subtitles")):
        if path is not None:
            files[path] = (format_of(path, what), what)
            check_writable(path, what)
    return files


def save_words(files: dict):
    """A ``save(words)`` writing each of ``files`` (:func:`word_files`) through ttscli.outfile."""
    from ttscli.outfile import write_bytes
    from ttscli.words import render

    def save(words) -> None:
        for path, (fmt, what) in files.items():
            write_bytes(path, render(words, fmt).encode("utf-8"), what)

    return save


def run_synthesis(pipe, request, output: Optional[str], fmt: Optional[str], play: bool, workers: int,
                  sample_rate: Optional[int] = None, words: Optional[dict] = None, texts=None) -> None:
    """``words``: the word files (:func:`word_files`), written with the audio or not at all.
    ``texts``: the text's deltas (--stream-input), spoken a sentence at a time as they arrive."""
    from functools import partial

    from ttscli.audio import open_sink
    from ttscli.generate import effective_workers, render, render_words

    output = default_output(output, play)
    play = play or output is None
    n_workers, why = effective_workers(pipe, workers) if texts is None else (1, None)
    if texts is not None and workers > 1:
        why = f"--workers {workers}: streamed text is spoken a sentence at a time, as it arrives"
    if why:
        note(why)
    if words and n_workers > 1 and not pipe.concurrent_safe:
        note(f"--workers {n_workers}: word timestamps run chunks one at a time on this model")
    sink = open_sink(output, pipe.sample_rate, fmt, play, sample_rate)
    if texts is not None:
        from ttscli.stream_input import render_stream

        def run(pipe, request, sink, workers):
            return render_stream(pipe, texts, request, sink, save_words(words) if words else None)
    else:
        run = partial(render_words, save=save_words(words)) if words else render
    prog, cb = progress_callback("speaking") if texts is None else (None, None)
    t0 = time.perf_counter()
    try:
        if prog:
            with prog:
                n = run(pipe, request, sink, workers=n_workers, on_chunk=cb)
        else:
            n = run(pipe, request, sink, workers=n_workers)
    except KeyboardInterrupt:
        raise Interrupted() from None
    if output not in (None, "-"):
        note(f"wrote {output} ({n / pipe.sample_rate:.2f} s at {sample_rate or pipe.sample_rate} Hz)")
    if State.verbose and n:
        took = time.perf_counter() - t0
        note(f"synthesized {n / pipe.sample_rate:.2f} s of audio in {took:.2f} s "
             f"(real-time factor {took / (n / pipe.sample_rate):.3f}, {n_workers} worker(s))")


def resolve_model(model, registry, model_dir=None):
    """The registry entry for -m (with --model-dir: the Piper voice the folder holds), and its
    family (errors before anything is loaded)."""
    from ttscli.errors import NotImplementedModelError
    from ttscli.models import family_of

    reg = registry_from(registry)
    spec = reg.resolve(model, model_dir)
    if not spec.implemented:
        raise NotImplementedModelError(
            f"{spec.id} is in the registry but ttscli does not implement it yet; see `ttscli models`")
    return reg, spec, family_of(spec)


@dataclass(frozen=True)
class BackendsAsked:
    """What --backend (and its alias --code-decoder-backend) asked for: component -> backend, and
    how each was given, so that a message names the option the user typed."""

    backends: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)

    def for_model(self, spec) -> "BackendsAsked":
        """Only the components ``spec``'s model has (serve: several models share the options)."""
        keep = {c: b for c, b in self.backends.items() if c in spec.backends}
        return BackendsAsked(keep, {c: v for c, v in self.labels.items() if c in keep})


def backends_asked(backend: Optional[List[str]], code_decoder_backend: Optional[Backend] = None) -> BackendsAsked:
    from ttscli.backends.select import parse_backend_options

    asked = parse_backend_options(backend)
    labels = {}
    if code_decoder_backend is not None:
        value = code_decoder_backend.value
        if asked.get("code_decoder", value) != value:
            raise UsageError(f"--code-decoder-backend {value} and --backend code_decoder={asked['code_decoder']} "
                             "disagree; give one")
        asked["code_decoder"] = value
        labels["code_decoder"] = f"--code-decoder-backend {value}"
    return BackendsAsked(asked, labels)


def check_backends(spec, family, asked: BackendsAsked) -> None:
    """Check what was asked for ``spec``'s model before anything loads, each message naming the
    option the user typed; -v says where every component runs and why."""
    from ttscli.backends.select import resolve

    chosen = resolve(spec, family, asked.backends, labels=asked.labels)
    if State.verbose:
        for c, choice in chosen.items():
            note(f"{c}: {choice.backend} ({choice.why})")


def load_pipeline(reg, spec, model_dir, asked: BackendsAsked, dtype, random_weights: bool = False):
    from ttscli import api
    from ttscli.models import family_of
    from ttscli.models.base import LoadOptions

    if spec.license_notice:
        note(f"note: {spec.license_notice}")
    check_backends(spec, family_of(spec), asked)
    options = LoadOptions(dtype=dtype, backends=dict(asked.backends), random_weights=random_weights)
    return api.load(spec.id, model_dir=model_dir, registry=reg, options=options)


# ---- commands -------------------------------------------------------------------------------


@app.command(epilog="Example: [bold]ttscli speak \"The quick brown fox.\" -o fox.wav[/bold]")
@with_knobs("speak")
def speak(
    text: Optional[str] = typer.Argument(None, help="Text to speak; - reads stdin."),
    file: Optional[Path] = typer.Option(None, "-f", "--file", help="Read the text from a UTF-8 file."),
    model: Optional[str] = Model,
    model_dir: Optional[Path] = ModelDir,
    output: Optional[str] = Output,
    fmt: Optional[str] = Format,
    sample_rate: Optional[int] = SampleRate,
    play: bool = Play,
    voice: Optional[str] = typer.Option(None, "--voice", help="Preset voice name (a multi-speaker Piper voice: "
                                        "a speaker's name or number), or a saved voice .safetensors."),
    instruct: Optional[str] = typer.Option(None, "--instruct", help="Style instruction or voice description."),
    language: Optional[str] = Language,
    speed: float = typer.Option(1.0, "--speed", min=0.25, max=4.0, help="Speaking rate (1.0 = model default)."),
    seed: Optional[int] = Seed,
    max_frames: Optional[int] = MaxFrames,
    stream: bool = Stream,
    first_chunk_frames: Optional[int] = FirstChunkFrames,
    chunk_frames: int = ChunkFrames,
    backend: Optional[List[str]] = BackendChoice,
    code_decoder_backend: Optional[Backend] = CodeDecoderBackend,
    workers: int = Workers,
    dtype: Optional[str] = Dtype,
    timestamps: Optional[str] = Timestamps,
    subtitles: Optional[str] = Subtitles,
    ssml: bool = Ssml,
    normalize_text: bool = NormalizeText,
    sentence_silence: float = SentenceSilence,
    stream_input: bool = typer.Option(False, "--stream-input", help="Speak the text (- for stdin, or --file: a "
                                      "pipe or FIFO) as it arrives: each sentence once it is complete, while "
                                      "later text is still being written (an LLM's output). Not with --ssml."),
    registry: Optional[List[Path]] = Registry,
    quiet: bool = Quiet, verbose: bool = Verbose, debug: bool = Debug,
    knobs: Optional[dict] = None,
):
    """Speak text with a model (default: the registry's default, an embedded voice)."""
    set_flags(quiet, verbose, debug)
    from ttscli.audio import check_output
    from ttscli.generate import Request, check_request
    from ttscli.stream_input import PROBE_TEXT
    from ttscli.text import MAX_TEXT_BYTES, check_text

    texts = None
    if stream_input:
        if ssml:
            raise UsageError("--stream-input cannot read SSML (a tag may span sentences); use [pause:S] markers")
        texts = stream_text(text, file)
        body = PROBE_TEXT   # the other fields are checked now, each sentence as it comes
    else:
        body = read_text(text, file)
    check_output(default_output(output, play), fmt, sample_rate)
    words = word_files(timestamps, subtitles)
    if instruct is not None:
        instruct = check_text(instruct, "--instruct", MAX_TEXT_BYTES)
    reg, spec, family = resolve_model(model, registry, model_dir)
    request = check_request(spec, family, Request(
        text=body, voice=voice, instruct=instruct, language=language, seed=seed, speed=speed,
        max_frames=max_frames, stream=stream, first_chunk_frames=first_chunk_frames, chunk_frames=chunk_frames,
        knobs=knobs or {}, ssml=ssml, normalize_text=normalize_text, sentence_silence=sentence_silence,
    ))
    pipe = load_pipeline(reg, spec, model_dir, backends_asked(backend, code_decoder_backend), dtype)
    run_synthesis(pipe, request, output, fmt, play, workers, sample_rate, words, texts)


@app.command(epilog="Example: [bold]ttscli clone \"Hello there.\" --ref me.wav "
                     "--ref-text \"What I said.\" -o out.wav[/bold]")
@with_knobs("clone")
def clone(
    text: Optional[str] = typer.Argument(None, help="Text to speak in the reference voice; - reads stdin."),
    ref: Optional[Path] = typer.Option(None, "--ref", help="Reference audio (any format soundfile reads)."),
    ref_text: Optional[str] = typer.Option(
        None, "--ref-text", help="Transcript of the reference (in-context cloning)."),
    save_voice: Optional[Path] = typer.Option(
        None, "--save-voice", help="Store the voice prompt in a .safetensors file."),
    instruct: Optional[str] = typer.Option(
        None, "--instruct", help="Style to speak the cloned voice in (models that take one, e.g. voxcpm2)."),
    file: Optional[Path] = typer.Option(None, "-f", "--file", help="Read the text from a UTF-8 file."),
    model: Optional[str] = Model,
    model_dir: Optional[Path] = ModelDir,
    output: Optional[str] = Output,
    fmt: Optional[str] = Format,
    sample_rate: Optional[int] = SampleRate,
    play: bool = Play,
    language: Optional[str] = Language,
    seed: Optional[int] = Seed,
    max_frames: Optional[int] = MaxFrames,
    stream: bool = Stream,
    first_chunk_frames: Optional[int] = FirstChunkFrames,
    chunk_frames: int = ChunkFrames,
    backend: Optional[List[str]] = BackendChoice,
    code_decoder_backend: Optional[Backend] = CodeDecoderBackend,
    workers: int = Workers,
    dtype: Optional[str] = Dtype,
    timestamps: Optional[str] = Timestamps,
    subtitles: Optional[str] = Subtitles,
    ssml: bool = Ssml,
    normalize_text: bool = NormalizeText,
    sentence_silence: float = SentenceSilence,
    registry: Optional[List[Path]] = Registry,
    quiet: bool = Quiet, verbose: bool = Verbose, debug: bool = Debug,
    knobs: Optional[dict] = None,
):
    """Speak text in the voice of a reference recording."""
    set_flags(quiet, verbose, debug)
    from dataclasses import replace

    from ttscli.audio import check_output, read_reference, resample
    from ttscli.generate import Request, check_request, needs_ref_text
    from ttscli.text import MAX_TEXT_BYTES, check_text

    body = read_text(text, file)
    check_output(default_output(output, play), fmt, sample_rate)
    words = word_files(timestamps, subtitles)
    if ref is None:
        raise UsageError("clone needs --ref FILE (a recording of the voice)")
    knobs = knobs or {}
    if ref_text is not None:
        ref_text = check_text(ref_text, "--ref-text")
    if instruct is not None:
        instruct = check_text(instruct, "--instruct", MAX_TEXT_BYTES)
    if save_voice is not None and save_voice.suffix != ".safetensors":
        raise UsageError("--save-voice must name a .safetensors file")
    if model is None:
        model = registry_from(registry).default_clone
    reg, spec, family = resolve_model(model, registry, model_dir)
    if not spec.can("clone"):
        raise UsageError(f"{spec.id} cannot clone voices; pick a model with clone support (see `ttscli models`)")
    if ref_text is None and needs_ref_text(family, knobs):
        raise UsageError("give --ref-text (the reference transcript) for in-context cloning, or --x-vector-only")
    mono, sr = read_reference(ref, max_seconds=float(spec.defaults.get("max_ref_seconds", 30.0)))
    request = check_request(spec, family, Request(
        text=body, ref_audio=mono, ref_sample_rate=sr, ref_text=ref_text, instruct=instruct,
        save_voice=save_voice, language=language, seed=seed, max_frames=max_frames, stream=stream,
        first_chunk_frames=first_chunk_frames, chunk_frames=chunk_frames,
        knobs=knobs, ssml=ssml, normalize_text=normalize_text, sentence_silence=sentence_silence,
    ))
    pipe = load_pipeline(reg, spec, model_dir, backends_asked(backend, code_decoder_backend), dtype)
    rate = pipe.ref_sample_rate or sr
    request = replace(request, ref_audio=resample(mono, sr, rate), ref_sample_rate=rate)
    run_synthesis(pipe, request, output, fmt, play, workers, sample_rate, words)


@app.command(epilog="Examples: [bold]ttscli models --json[/bold], [bold]ttscli models qwen3-tts-0.6b-base[/bold]")
def models(
    model: Optional[str] = typer.Argument(None, help="Show one model: its knobs, voices, languages, backends "
                                          "(also a Piper voice PATH.onnx or piper:VOICE)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output on stdout."),
    registry: Optional[List[Path]] = Registry,
    quiet: bool = Quiet, verbose: bool = Verbose, debug: bool = Debug,
):
    """List the registry (implemented or not, weights present or not, usable backends), or one model in full."""
    set_flags(quiet, verbose, debug)
    from rich.console import Console

    from ttscli.inventory import describe, inventory, render_details, render_table

    reg = registry_from(registry)
    if model is not None:
        info = describe(reg, reg.resolve(model))
        if json_out:
            print_json(info)
        else:
            Console().print(render_details(info))
        return
    rows = inventory(reg)
    if json_out:
        print_json(rows)
    else:
        Console().print(render_table(rows))


@app.command(epilog="Example: [bold]ttscli convert qwen3-tts-0.6b-base --to mlx -q --q-bits 8 -o qwen-8bit[/bold]")
def convert(
    model: str = typer.Argument(..., help="Model id or alias."),
    to: str = typer.Option(..., "--to", help="mlx, coreml or onnx."),
    output: Optional[Path] = typer.Option(
        None, "-o", "--output",
        help="Output folder (default: ttscli's cache, where speak finds Core ML packages on its own)."),
    quantize: bool = typer.Option(False, "-q", "--quantize", help="Quantize weights (mlx)."),
    q_bits: int = typer.Option(4, "--q-bits", help="Bits per quantized weight: 4 or 8."),
    q_group_size: Optional[int] = typer.Option(None, "--q-group-size",
                                               help="Quantization group size (default: 64 mlx, 32 onnx)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float16, bfloat16 or float32 for unquantized tensors."),
    capacity: Optional[int] = typer.Option(None, "--capacity", show_default=False,
                                           help="Core ML KV-cache positions of the code decoder (default: the "
                                                "model's; `ttscli models MODEL` shows it)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output folder."),
    model_dir: Optional[Path] = ModelDir,
    registry: Optional[List[Path]] = Registry,
    quiet: bool = typer.Option(False, "--quiet", help="Print nothing but errors."),
    verbose: bool = Verbose, debug: bool = Debug,
):
    """Convert a checkpoint: MLX safetensors (optionally quantized) or Core ML packages."""
    set_flags(quiet, verbose, debug)
    from ttscli.convert import ConvertRequest, convert as do_convert

    req = ConvertRequest(model=model, to=to, output=output, quantize=quantize, q_bits=q_bits,
                         q_group_size=q_group_size, dtype=dtype, capacity=capacity, force=force,
                         model_dir=model_dir)
    out = do_convert(req, registry_from(registry), note=note)
    note(f"wrote {out}")


@app.command(epilog="Example: [bold]ttscli bench qwen3-tts-0.6b-base --random-weights "
                     "--prefill-mode batched,sequential[/bold]")
def bench(
    model: Optional[str] = typer.Argument(None, help="Model id or alias (default: the embedded voice)."),
    random_weights: bool = typer.Option(
        False, "--random-weights", help="Real dimensions, random weights: no download."),
    text: Optional[str] = typer.Option(None, "--text", help="Text to speak (default: a fixed paragraph)."),
    file: Optional[Path] = typer.Option(None, "-f", "--file"),
    repeats: int = typer.Option(3, "-n", "--repeats", min=1),
    warmup: int = typer.Option(1, "--warmup", min=0),
    code_decoder_backend: str = typer.Option(
        "", "--code-decoder-backend", show_default=False,
        help="One or more, comma-separated, e.g. mlx,onnx-f32,onnx,onnx-int4, for the model's code decoder, or "
             "its one component with several backends; default: the model's default."),
    backend: Optional[List[str]] = typer.Option(
        None, "--backend", metavar="COMPONENT=NAME[,NAME..]",
        help="Where a component runs (repeatable); one component may list several backends to compare "
             "(`ttscli models MODEL` lists them)."),
    workers: int = Workers,
    prefill_mode: str = typer.Option("batched", "--prefill-mode", help="batched, sequential, or both comma-separated."),
    peer: Optional[str] = typer.Option(
        None, "--peer", help="Also time a peer on the same text (`ttscli models MODEL` lists them)."),
    stream: bool = typer.Option(False, "--stream", help="Measure time to first audio when streaming."),
    cold: bool = typer.Option(
        False, "--cold", help="Time whole processes instead: `ttscli --help`, a one-line `ttscli speak` and "
                              "piper-tts's `piper` on the same voice and text (default: Hello.), -n runs each "
                              "in alternating order, after --warmup runs."),
    max_frames: Optional[int] = MaxFrames,
    prompt_tokens: int = typer.Option(200, "--prompt-tokens", min=1, help="Prefill length for prefill timing."),
    batch: Optional[str] = typer.Option(
        None, "--batch", help="Rows generated at once, side by side, e.g. 1,4,16 (codec LMs)."),
    json_out: bool = typer.Option(False, "--json", help="Figures and environment as JSON on stdout."),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="PNG of per-frame latency, for models that make frames one by one (needs matplotlib)."),
    quality: bool = typer.Option(
        False, "--quality", help="Add WER/CER and DNSMOS of the audio (as `ttscli eval`; needs ttscli\\[eval])."),
    ref: Optional[Path] = typer.Option(
        None, "--ref", help="Reference audio to clone, for models that need one (a Base model); with --ref-text."),
    ref_text: Optional[str] = typer.Option(None, "--ref-text", help="Transcript of the --ref recording."),
    model_dir: Optional[Path] = ModelDir,
    dtype: Optional[str] = Dtype,
    registry: Optional[List[Path]] = Registry,
    quiet: bool = Quiet,
    verbose: bool = typer.Option(
        False, "-v", "--verbose", help="Every figure in the table, a model's internal ones too (as --json has them)."),
    debug: bool = Debug,
):
    """Measure load time, first audio, per-frame latency, real-time factor and memory (-v: every figure)."""
    set_flags(quiet, verbose, debug)
    from ttscli.bench import BenchRequest, run_bench

    body = read_text(text, file) if (text is not None or file is not None) else None
    if cold:
        from ttscli.bench import COLD_TEXT, ColdRequest, run_cold

        req = ColdRequest(model=model, text=body or COLD_TEXT, runs=repeats, warmup=warmup, model_dir=model_dir,
                          registry_files=list(registry or []))
        report = run_cold(req, registry_from(registry), console=None if quiet else stderr_console())
        if json_out:
            print_json(report)
        return
    from ttscli.backends.select import parse_backend_options

    fixed, compared, component = {}, [b.strip() for b in code_decoder_backend.split(",") if b.strip()], None
    for c, names in parse_backend_options(backend).items():
        several = [b.strip() for b in names.split(",") if b.strip()]
        if len(several) == 1:
            fixed[c] = several[0]
        elif compared:
            raise UsageError(f"--backend {c}={names}: compare the backends of one component at a time")
        else:
            compared, component = several, c
    req = BenchRequest(model=model, random_weights=random_weights, text=body, repeats=repeats, warmup=warmup,
                       backends=compared, component=component, fixed_backends=fixed,
                       prefill_modes=[m.strip() for m in prefill_mode.split(",") if m.strip()],
                       peer=peer, stream=stream, max_frames=max_frames, prompt_tokens=prompt_tokens,
                       model_dir=model_dir, dtype=dtype, plot=plot, quality=quality, workers=workers,
                       ref=ref, ref_text=ref_text, verbose=State.verbose)
    if batch:
        try:
            req.batch = [int(x) for x in batch.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--batch takes sizes like 1,4,16, not {batch!r}") from None
    report = run_bench(req, registry_from(registry), console=None if quiet else stderr_console())
    if json_out:
        print_json(report)


@app.command(epilog="Example: [bold]ttscli parity piper-joe --against onnxruntime[/bold]")
def parity(
    model: Optional[str] = typer.Argument(None, help="Model id or alias (default: the embedded voice)."),
    golden: Optional[Path] = typer.Option(None, "--golden", help="Goldens .npz (format: docs/parity.md)."),
    against: Optional[str] = typer.Option(None, "--against", help="Another backend: mlx, coreml, onnxruntime."),
    frames: int = typer.Option(20, "--frames", min=1, help="Greedy frames to compare."),
    code_decoder_backend: Optional[Backend] = CodeDecoderBackend,
    json_out: bool = typer.Option(False, "--json"),
    model_dir: Optional[Path] = ModelDir,
    registry: Optional[List[Path]] = Registry,
    quiet: bool = Quiet, verbose: bool = Verbose, debug: bool = Debug,
):
    """Check numerical fidelity against goldens or another backend; exit 1 if any check fails."""
    set_flags(quiet, verbose, debug)
    from ttscli.parity import ParityRequest, run_parity

    if (golden is None) == (against is None):
        raise UsageError("give exactly one of --golden FILE or --against BACKEND")
    req = ParityRequest(model=model, golden=golden, against=against, frames=frames, model_dir=model_dir,
                        backend=code_decoder_backend.value if code_decoder_backend else None)
    report = run_parity(req, registry_from(registry), console=None if quiet else stderr_console())
    if json_out:
        print_json(report)
    if not report["passed"]:
        raise typer.Exit(1)


@app.command("eval", epilog="Example: [bold]ttscli eval --texts smoke.txt --max-wer 0.1[/bold]")
@with_knobs("speak")
def eval_cmd(
    texts: Optional[Path] = typer.Option(
        None, "--texts", help="UTF-8 file, one utterance per line (not with a `ttscli batch` folder).", dir_okay=False),
    model: Optional[str] = Model,
    model_dir: Optional[Path] = ModelDir,
    random_weights: bool = typer.Option(
        False, "--random-weights", help="Real dimensions, random weights: no download; the pipeline runs end to "
                                        "end (2 s per line, the stop ignored), its figures mean nothing."),
    audio: Optional[List[Path]] = typer.Option(
        None, "--audio", help="Score these files (a folder's in name order; a `ttscli batch` folder by its manifest) "
                              "instead of synthesizing; repeatable."),
    voice: Optional[str] = typer.Option(None, "--voice", help="Preset voice name, or a saved voice .safetensors."),
    instruct: Optional[str] = typer.Option(None, "--instruct", help="Style instruction or voice description."),
    language: Optional[str] = typer.Option(None, "--language", help="Language of the texts; also given to the ASR."),
    seed: int = typer.Option(0, "--seed", help="Seed of line 1 (line n uses seed + n - 1)."),
    ref: Optional[Path] = typer.Option(None, "--ref", help="Reference voice: cloned from, and compared with."),
    ref_text: Optional[str] = typer.Option(None, "--ref-text", help="Transcript of --ref (in-context cloning)."),
    max_wer: Optional[float] = typer.Option(
        None, "--max-wer", min=0.0, help="Fail (exit 1) above this corpus WER (0.1 = 10%)."),
    min_mos: Optional[float] = typer.Option(
        None, "--min-mos", min=1.0, max=5.0, help="Fail below this mean DNSMOS OVRL."),
    min_sim: Optional[float] = typer.Option(
        None, "--min-sim", min=-1.0, max=1.0, help="Fail below this mean speaker similarity to --ref."),
    json_out: bool = typer.Option(False, "--json", help="Figures as JSON on stdout."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="PNG of WER and DNSMOS per line (needs matplotlib)."),
    asr_model_dir: Optional[Path] = typer.Option(
        None, "--asr-model-dir", help="A CTranslate2 Whisper folder instead of the packaged one.", file_okay=False),
    speaker_model: Optional[Path] = typer.Option(
        None, "--speaker-model", help="Resemblyzer weights file instead of the packaged one.", dir_okay=False),
    backend: Optional[List[str]] = BackendChoice,
    registry: Optional[List[Path]] = Registry,
    quiet: bool = Quiet, verbose: bool = Verbose, debug: bool = Debug,
    knobs: Optional[dict] = None,
):
    """Score speech: ASR round-trip WER/CER, DNSMOS, speaker similarity; thresholds make it a CI gate."""
    set_flags(quiet, verbose, debug)
    from ttscli.eval.run import EvalRequest, read_texts, render_table, run_eval

    if audio and (model or model_dir or random_weights or voice or instruct or ref_text or knobs or backend):
        raise UsageError("--audio scores existing files: drop -m/--model-dir/--random-weights/--voice/--instruct/"
                         "--ref-text/--backend/knobs")
    req = EvalRequest(texts=read_texts(texts) if texts is not None else [], language=language, model=model,
                      model_dir=model_dir, random_weights=random_weights, voice=voice, instruct=instruct, seed=seed,
                      ref=ref, ref_text=ref_text,
                      audio=list(audio) if audio else None,
                      asr_model_dir=asr_model_dir, speaker_model=speaker_model, max_wer=max_wer, min_mos=min_mos,
                      min_sim=min_sim, plot=plot, knobs=knobs or {}, backends=backends_asked(backend).backends)
    prog, cb = progress_callback("scoring")
    if prog:
        with prog:
            report = run_eval(req, registry_from(registry), on_line=cb)
    else:
        report = run_eval(req, registry_from(registry))
    if not quiet:
        stderr_console().print(render_table(report))
    if json_out:
        print_json(report)
    if report["failed"]:
        raise TTSError("eval failed: " + "; ".join(report["failed"]))


def read_api_key(key: Optional[str], path: Optional[Path]) -> Optional[str]:
    """The API key from --api-key/$TTSCLI_API_KEY or from --api-key-file (one way only), read once."""
    if path is None:
        if key is not None and not key.strip():
            raise UsageError("--api-key (or $TTSCLI_API_KEY) is empty; give a key, or leave it out to serve openly")
        return key
    if key is not None:
        raise UsageError("give the API key one way: --api-key (or $TTSCLI_API_KEY), or --api-key-file")
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read --api-key-file {path}: {getattr(e, 'strerror', None) or e}") from None
    if not key:
        raise UsageError(f"--api-key-file {path} is empty; put the key in it")
    return key


@app.command(epilog="Example: [bold]ttscli serve -m piper-joe --port 8000[/bold], then POST /v1/audio/speech")
def serve(
    model: Optional[List[str]] = typer.Option(
        None, "-m", "--model", help="Model to serve (repeatable; default: the registry default)."),
    model_dir: Optional[Path] = ModelDir,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (default: loopback only)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port (0: any free one)."),
    api_key: Optional[str] = typer.Option(
        None, "--api-key", envvar="TTSCLI_API_KEY",
        help="Require Authorization: Bearer KEY. A key given here shows in `ps` to every user of the machine: "
             "prefer $TTSCLI_API_KEY or --api-key-file."),
    api_key_file: Optional[Path] = typer.Option(
        None, "--api-key-file", dir_okay=False, help="Read the API key from this file (surrounding whitespace "
                                                     "ignored)."),
    allowed_host: Optional[List[str]] = typer.Option(
        None, "--allowed-host", help="Another name clients may reach the server by (repeatable; * for any, e.g. "
                                     "behind a reverse proxy that checks Host itself). Always answered: localhost, "
                                     "loopback addresses, the --host address; any address when --host is 0.0.0.0 "
                                     "or ::. Requests naming another host get 400 (DNS rebinding)."),
    cors_origin: Optional[List[str]] = typer.Option(
        None, "--cors-origin", help="A web origin (scheme://host[:port]) whose pages may call the API "
                                    "(repeatable; * for any). Other cross-origin requests get 403."),
    header_timeout: float = typer.Option(HTTPOptions.header_timeout, "--header-timeout", min=0.1,
                                         help="Seconds a client has to send a request's line and headers."),
    body_timeout: float = typer.Option(HTTPOptions.body_timeout, "--body-timeout", min=0.1,
                                       help="Seconds a client has to send a request's body (up to 16 MiB); "
                                            "then 408."),
    keep_alive_timeout: float = typer.Option(HTTPOptions.keep_alive_timeout, "--keep-alive-timeout", min=0.1,
                                             help="Seconds an idle connection stays open between requests."),
    max_connections: int = typer.Option(HTTPOptions.max_connections, "--max-connections", min=1,
                                        help="Open connections at most: a new one closes the oldest idle one, "
                                             "or gets 503 when all have a request in progress."),
    ws_idle_timeout: float = typer.Option(HTTPOptions.ws_idle_timeout, "--ws-idle-timeout", min=0.1,
                                          help="Seconds a WebSocket stream (/v1/audio/speech/stream) may go "
                                               "without a client message while nothing is being spoken, or "
                                               "without reading while audio waits; then it is closed."),
    max_queue: int = typer.Option(16, "--max-queue", min=1, help="Requests waiting per model; more get 503."),
    max_batch: int = typer.Option(16, "--max-batch", min=1,
                                  help="Requests in progress at once per model: rows of one batch where the model "
                                       "generates in batches (`ttscli models MODEL` says), else generations taking "
                                       "turns a chunk each, a new one first, so a short request is not stuck behind "
                                       "a long one (1: one at a time)."),
    max_input_chars: int = typer.Option(4096, "--max-input-chars", min=1,
                                        help="Longest `input` in characters (OpenAI's limit); longer gets 400. "
                                             "The 32,768-byte text limit applies as well."),
    request_timeout: float = typer.Option(300.0, "--request-timeout", min=0.0,
                                          help="Seconds a request may generate, counted from when it leaves the "
                                               "queue (waiting is bounded by --max-queue); past it, it stops at "
                                               "its next chunk: 504 before any audio, else the stream ends "
                                               "incomplete. 0: no limit."),
    strict: bool = typer.Option(False, "--strict",
                                help="Refuse (400) a request field the model cannot honour, e.g. `instructions` "
                                     "on a model without instructions or an OpenAI voice name. Without it such "
                                     "a field is ignored and named in the X-Ignored-Fields response header."),
    voices_dir: Optional[Path] = typer.Option(None, "--voices-dir", file_okay=False,
                                              help="Saved voices (NAME.safetensors) that `voice` can name."),
    access_log: bool = typer.Option(False, "--access-log",
                                    help="One line per request on stderr: client, method, path, status, model, "
                                         "input characters, first-byte and total ms, bytes sent, how it ended "
                                         "(never the API key or the text). On with -v as well."),
    log_format: str = typer.Option("text", "--log-format",
                                   help="text or json (one JSON object per access-log line; turns the access "
                                        "log on)."),
    backend: Optional[List[str]] = BackendChoice,
    code_decoder_backend: Optional[Backend] = CodeDecoderBackend,
    dtype: Optional[str] = Dtype,
    random_weights: bool = typer.Option(
        False, "--random-weights",
        help="Test only: build every model at its real size with random weights (no download, no weights "
             "folder) for load tests. The audio is noise; the startup line, each /v1/models entry "
             "(random_weights: true) and an X-Random-Weights header on every speech response say so. A "
             "model that makes frames never stops by itself then: each request runs exactly its max_frames "
             "(default 50), as `ttscli bench --random-weights` does."),
    registry: Optional[List[Path]] = Registry,
    quiet: bool = Quiet, verbose: bool = Verbose, debug: bool = Debug,
):
    """Serve models over HTTP: OpenAI's /v1/audio/speech, /v1/models, /v1/audio/voices, /health,
    /metrics (Prometheus); a playground page at / and the API docs at /docs."""

    def _plain_note(msg: str) -> None:  # unwrapped: scripts read the port from this line
        if not State.quiet:
            sys.stderr.write(msg + "\n")
            sys.stderr.flush()

    set_flags(quiet, verbose, debug)
    if log_format not in ("text", "json"):
        raise UsageError(f"--log-format takes text or json, not {log_format!r}")
    from ttscli.paths import config_dir
    from ttscli.serve import is_loopback, require_extra, serve as run_server

    require_extra()
    from ttscli.serve.guard import check_allowed_host, check_cors_origin

    api_key = read_api_key(api_key, api_key_file)
    http = HTTPOptions(allowed_hosts=tuple(map(check_allowed_host, allowed_host or ())),
                       cors_origins=tuple(map(check_cors_origin, cors_origin or ())),
                       header_timeout=header_timeout, body_timeout=body_timeout,
                       keep_alive_timeout=keep_alive_timeout, max_connections=max_connections,
                       ws_idle_timeout=ws_idle_timeout)
    names = list(dict.fromkeys(model or [None]))
    if model_dir is not None and len(names) > 1:
        raise UsageError("--model-dir goes with one -m; serve several local checkouts from separate servers")
    if model_dir is not None and random_weights:
        raise UsageError("--random-weights builds the model without weights; drop --model-dir")
    asked = backends_asked(backend, code_decoder_backend)
    loaders, specs, reg = {}, {}, None
    for name in names:
        reg, spec, family = resolve_model(name, registry, model_dir)
        specs[spec.id] = spec
        mine = asked.for_model(spec) if len(names) > 1 else asked
        check_backends(spec, family, mine)    # a bad --backend is one line before any model loads
        loaders[spec.id] = functools.partial(load_pipeline, reg, spec, model_dir, mine, dtype, random_weights)
    unused = set(asked.backends) - {c for spec in specs.values() for c in spec.backends}
    if unused:
        raise UsageError(f"--backend {sorted(unused)[0]}: no served model has that component "
                         "(`ttscli models MODEL` lists them)")
    if not is_loopback(host) and not api_key:
        note(f"note: listening on {host} without --api-key: anyone who can reach it can use it")
    try:
        run_server(loaders, specs, reg, host=host, port=port, api_key=api_key, max_queue=max_queue, max_batch=max_batch,
                   voices_dir=voices_dir or config_dir() / "voices", http=http, note=_plain_note,
                   max_input_chars=max_input_chars, request_timeout=request_timeout, strict=strict,
                   random_weights=random_weights,
                   access_log=log_format if access_log or State.verbose or log_format == "json" else None)
    except KeyboardInterrupt:
        raise Interrupted() from None


@app.command(epilog="Example: [bold]ttscli batch lines.jsonl -o corpus/ --seed 1[/bold] "
                     "(re-run the same command to resume)")
def batch(
    manifest: Path = typer.Argument(..., help="Rows to speak: .jsonl or .csv with id, text and optional "
                                    "voice, ref_audio, ref_text, instruct, language, seed, knobs; or .txt, "
                                    "one row per non-empty line, its id from the line number (line-0001)."),
    output: Path = typer.Option(
        ..., "-o", "--output", help="Output folder: DIR/<shard>/<id>.<fmt>, DIR/manifest.jsonl, DIR/errors.jsonl."),
    model: Optional[str] = Model,
    model_dir: Optional[Path] = ModelDir,
    fmt: str = typer.Option("wav", "--format", help=f"{', '.join(AUDIO_FORMATS)} (the files' format)."),
    seed: int = typer.Option(
        0, "--seed", min=0, max=2**32 - 1, help="Base of the per-row seeds (rows without their own)."),
    engine: str = typer.Option("local", "--engine", help="local (this process) or ray (a Ray cluster)."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local cluster "
                                    "on 127.0.0.1 that ends with the command)."),
    ray_workers: int = typer.Option(2, "--ray-workers", min=1, help="Ray actors, one model each."),
    batch_size: int = typer.Option(16, "--batch-size", min=1,
                                   help="Rows generated at once by models with batched generation (`ttscli models "
                                        "MODEL` says which)."),
    backend: Optional[List[str]] = BackendChoice,
    code_decoder_backend: Optional[Backend] = CodeDecoderBackend,
    dtype: Optional[str] = Dtype,
    timestamps: bool = typer.Option(False, "--timestamps", help="Add each row's words to its line in "
                                    "DIR/manifest.jsonl: \"words\": [{word, start, end, source}] (rows run one "
                                    "at a time; a row done without words is done again)."),
    registry: Optional[List[Path]] = Registry,
    quiet: bool = Quiet, verbose: bool = Verbose, debug: bool = Debug,
):
    """Synthesize every row of a manifest into a folder; resumable, failures go to an errors file."""
    set_flags(quiet, verbose, debug)
    from ttscli.batch import BatchJob, ModelRef, Summary, progress, run_batch, run_local

    if engine not in ("local", "ray"):
        raise UsageError(f"--engine {engine}: choose local or ray")
    if ray_address is not None and engine != "ray":
        raise UsageError("--ray-address goes with --engine ray")
    if engine == "ray":
        from ttscli.batch.ray_engine import choose_cluster, run_ray

        cluster = choose_cluster(ray_address)
        note(cluster.describe())  # the first line: where the rows will run, and who can reach it
    _, spec, family = resolve_model(model, registry, model_dir)
    if spec.license_notice:
        note(f"note: {spec.license_notice}")
    asked = backends_asked(backend, code_decoder_backend)
    check_backends(spec, family, asked)    # a bad --backend is one line here; each worker picks its defaults
    ref = ModelRef(model=spec.id, model_dir=model_dir, registry_files=list(registry or []), backends=asked.backends,
                   dtype=dtype)
    job = BatchJob(manifest=manifest, out=output, ref=ref, fmt=fmt.lower(), seed=seed, max_batch=batch_size,
                   timestamps=timestamps)
    if engine == "ray":
        def run_engine(rows, job):
            return run_ray(rows, job, cluster=cluster, workers=ray_workers)
    else:
        run_engine = run_local
    console = stderr_console()
    prog, on_start, on_row = (None, None, None) if quiet or not console.is_terminal else progress(console)
    s = Summary()
    try:
        if prog:
            with prog:
                run_batch(job, run_engine, on_row, on_start, summary=s)
        else:
            run_batch(job, run_engine, summary=s)
    except KeyboardInterrupt:
        raise Interrupted(stopped_batch(s, output)) from None
    note(f"wrote {s.written} of {s.total} rows to {output} ({s.skipped} already done, {s.failed} failed): "
         f"{s.audio_s:.1f} s of audio in {s.wall_s:.1f} s")
    if s.failed:
        raise TTSError(f"{s.failed} of {s.total} rows failed; see {output / 'errors.jsonl'} (a re-run retries them)")


def stopped_batch(s, output: Path) -> str:
    """What a stopped batch keeps: the rows written so far stay listed in the folder's manifest
    and a re-run starts after them."""
    kept = f"{s.written} of {s.total} rows written to {output}"
    if s.skipped:
        kept += f" ({s.skipped} more were already done)"
    return f"{kept}; re-run the same command to resume"


def version_callback(value: bool):
    if value:
        typer.echo(f"ttscli {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                      help="Print the version.")):
    """Open neural text-to-speech on-device (MLX, Core ML)."""


def command_tree() -> LazyGroup:
    """The click group that :func:`main` runs: ``app``'s own options, and its commands built as
    they are used (:class:`LazyCommands`)."""
    import copy

    root = copy.copy(app)
    root.registered_commands = []
    group = typer.main.get_command(root)
    build = functools.partial(typer.main.get_command_from_info, pretty_exceptions_short=app.pretty_exceptions_short,
                              rich_markup_mode=app.rich_markup_mode)
    group.commands = LazyCommands({info.name or typer.main.get_command_name(info.callback.__name__): info
                                   for info in app.registered_commands}, build)
    return group


def fail(msg: str) -> None:
    """The one line a user sees on error (no wrapping, no markup)."""
    sys.stderr.write(f"error: {msg}\n")
    sys.stderr.flush()


def _click_exception_types():
    """typer >= 0.16 vendors click; older versions raise click's own classes."""
    try:
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
    except ImportError:  # pragma: no cover
        from click.exceptions import ClickException, NoArgsIsHelpError
    return ClickException, NoArgsIsHelpError


def main(argv: Optional[list] = None) -> int:
    """The console entry point: one line on stderr and an exit code for every way a run ends."""
    import signal

    from ttscli import signals
    from ttscli.outfile import remove_partial_files

    previous = {s: signal.getsignal(s) for s in signals.STOP_SIGNALS}
    signals.at_stop(remove_partial_files)
    signals.install()
    stopped, outcome = False, Interrupted().outcome
    try:
        rc = _dispatch(list(sys.argv[1:] if argv is None else argv))
    except Interrupted as e:
        stopped, outcome = True, e.outcome
    except (KeyboardInterrupt, typer.Abort):
        stopped = True
    finally:
        # handlers first: a stop arriving during the cleanup must not raise out of main
        if signals.is_console_script():
            signals.install_for_exit()
        else:
            for s, h in previous.items():
                signal.signal(s, h)
            signals.uninstall_unraisable()
        remove_partial_files()  # whatever raised, and wherever: no .part outlives the run
    if stopped or signals.received() is not None:
        fail(signals.message(outcome=outcome))
        rc = signals.exit_code()
    signals.forget()  # a later write in this process (an in-process caller) is not stopped by this one
    return rc


def _quiet_stdout() -> None:
    """The reader went away: point stdout at /dev/null so the exit flush cannot complain."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _dispatch(args: list) -> int:
    from ttscli.errors import OutputClosed, os_error

    ClickException, NoArgsIsHelpError = _click_exception_types()
    State.debug = "--debug" in args
    try:
        rc = command_tree()(args=args, prog_name="ttscli", standalone_mode=False)
        return rc if isinstance(rc, int) else 0  # typer.Exit(n) comes back as a return value here
    except typer.Exit as e:
        return e.exit_code
    except NoArgsIsHelpError as e:  # `ttscli` alone: help on stdout, as --help, not an error
        typer.echo(e.format_message())
        return 0
    except ClickException as e:
        cmd = f" {e.ctx.command.name}" if getattr(e, "ctx", None) and e.ctx.command.name != "ttscli" else ""
        fail(f"{e.format_message()} (see `ttscli{cmd} --help`)")
        return 2
    except OutputClosed as e:  # `| head`: quiet, 141 as for a process killed by SIGPIPE
        _quiet_stdout()
        return e.exit_code
    except Interrupted:
        raise
    except TTSError as e:
        if State.debug:
            stderr_console().print_exception()
        fail(str(e))
        return e.exit_code
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except SystemExit as e:
        if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):  # typer met EPIPE on stdout
            _quiet_stdout()
            return 141
        return e.code if isinstance(e.code, int) else 1
    except Exception as e:  # noqa: BLE001 - a bug: one line unless --debug
        if State.debug:
            stderr_console().print_exception()
        from ttscli import mlx_runtime
        from ttscli.errors import missing_library

        # an MLX command on Linux without ttscli[cpu] or [cuda]; soundfile without its libsndfile
        missing = mlx_runtime.unavailable(e) if mlx_runtime.is_missing_backend(e) else missing_library(e)
        if missing is not None:
            fail(str(missing))
            return missing.exit_code
        # a full disk, read-only path or permission is the machine's state, not a bug
        known = os_error(e, doing="use") if isinstance(e, OSError) else None
        fail(str(known) if known else f"internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)")
        return known.exit_code if known else 1


if __name__ == "__main__":
    sys.exit(main())
