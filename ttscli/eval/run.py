"""`ttscli eval`: score each line (ASR round trip, DNSMOS, speaker similarity), total them, gate."""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ttscli.errors import AudioInputError, UsageError
from ttscli.eval import features, require
from ttscli.eval.scoring import Errors, errors

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".aiff", ".aif")
MANIFEST = "manifest.jsonl"          # what `ttscli batch` writes beside its files: one JSON entry per file
MAX_MANIFEST_BYTES = 64 << 20
# frames per line at --random-weights (2 s at 12.5 Hz): random weights never emit their stop
RANDOM_FRAMES = 25


@dataclass
class EvalRequest:
    texts: list[str]
    language: str | None = None              # the request's language, passed to the ASR too
    # synthesis through the library (when `audio` is None)
    model: str | None = None
    model_dir: Path | None = None
    random_weights: bool = False             # real dimensions, random weights: it runs, its figures mean nothing
    voice: str | None = None
    instruct: str | None = None
    seed: int | None = 0
    ref: Path | None = None                  # cloning reference; also the speaker to compare with
    ref_text: str | None = None
    knobs: dict = field(default_factory=dict)   # the family's knobs (models/base.py Knob), as speak takes them
    backends: dict = field(default_factory=dict)  # component -> backend, as speak's --backend
    # audio made elsewhere, one file per text line in name order
    audio: list[Path] | None = None
    asr_model_dir: Path | None = None
    speaker_model: Path | None = None
    max_wer: float | None = None
    min_mos: float | None = None
    min_sim: float | None = None
    plot: Path | None = None


@dataclass
class Line:
    text: str
    transcript: str
    errors: Errors
    mos: object                              # dnsmos.MOS
    duration_s: float
    synth_s: float | None = None
    similarity: float | None = None
    source: str = ""

    def row(self) -> dict:
        return {"text": self.text, "transcript": self.transcript, "source": self.source,
                "wer": self.errors.wer, "cer": self.errors.cer, "words": self.errors.words,
                "dnsmos_sig": self.mos.sig, "dnsmos_bak": self.mos.bak, "dnsmos_ovrl": self.mos.ovrl,
                "dnsmos_p808": self.mos.p808, "similarity": self.similarity, "duration_s": self.duration_s,
                "synth_s": self.synth_s, "rtf": None if self.synth_s is None else self.synth_s / self.duration_s}


class Evaluator:
    """The three scorers, each built on first use and kept (bench --quality reuses one)."""

    _shared: Evaluator | None = None

    def __init__(self, asr_model_dir: Path | None = None, speaker_model: Path | None = None):
        self.asr_model_dir, self.speaker_model = asr_model_dir, speaker_model
        self._asr = self._mos = self._speaker = None

    @classmethod
    def shared(cls) -> Evaluator:
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    @property
    def asr(self):
        if self._asr is None:
            from ttscli.eval.asr import ASR

            self._asr = ASR(self.asr_model_dir)
        return self._asr

    @property
    def mos(self):
        if self._mos is None:
            from ttscli.eval.dnsmos import DNSMOS

            self._mos = DNSMOS()
        return self._mos

    @property
    def speaker(self):
        if self._speaker is None:
            from ttscli.eval.speaker import VoiceEncoder

            self._speaker = VoiceEncoder(self.speaker_model)
        return self._speaker

    def check_ready(self, similarity: bool) -> None:
        """Load every model needed before any synthesis, so a missing one fails at once."""
        for module, what in (("faster_whisper", "the ASR round trip"), ("jiwer", "WER"),
                             ("whisper_normalizer", "WER"), ("onnxruntime", "DNSMOS"), ("speechmos", "DNSMOS")):
            require(module, what)
        _ = self.asr, self.mos
        if similarity:
            require("webrtcvad", "speaker similarity")
            _ = self.speaker

    def score(self, text: str, audio: np.ndarray, sample_rate: int, language: str | None,
              ref_embedding: np.ndarray | None = None) -> Line:
        audio = np.asarray(audio, np.float32).reshape(-1)
        if not len(audio):
            raise AudioInputError("no audio to score")
        x16 = features.resample(audio, sample_rate, 16000)
        transcript = self.asr.transcribe(x16, language)
        sim = None
        if ref_embedding is not None:
            from ttscli.eval.speaker import similarity

            sim = similarity(self.speaker.embed(audio, sample_rate), ref_embedding)
        return Line(text=text, transcript=transcript, errors=errors(text, transcript, language),
                    mos=self.mos(x16), duration_s=len(audio) / sample_rate, similarity=sim)

    def quality(self, audio, sample_rate: int, text: str, language: str | None = None) -> dict:
        from ttscli.eval.asr import whisper_language

        line = self.score(text, audio, sample_rate, whisper_language(language))
        return {"wer": line.errors.wer, "cer": line.errors.cer, "dnsmos_ovrl": line.mos.ovrl,
                "dnsmos_sig": line.mos.sig, "dnsmos_bak": line.mos.bak, "dnsmos_p808": line.mos.p808,
                "transcript": line.transcript}


# ---- inputs ---------------------------------------------------------------------------------


def read_texts(path: Path) -> list[str]:
    """One utterance per non-empty line of a UTF-8 file."""
    from ttscli.text import check_text, decode_text

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read --texts {path}: {e.strerror}") from None
    lines = [ln.strip() for ln in decode_text(data, "--texts").splitlines()]
    lines = [check_text(ln, f"--texts line {i + 1}") for i, ln in enumerate(lines) if ln]
    if not lines:
        raise UsageError(f"--texts {path} has no text lines")
    return lines


def audio_files(items: list[Path]) -> list[Path]:
    """Files as given; a folder contributes its audio files in name order."""
    out: list[Path] = []
    for item in items:
        item = Path(item)
        if item.is_dir():
            found = sorted(p for p in item.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file())
            if not found:
                raise UsageError(f"--audio {item} holds no audio files ({', '.join(AUDIO_SUFFIXES)})")
            out.extend(found)
        elif item.is_file():
            out.append(item)
        else:
            raise UsageError(f"--audio {item}: no such file or folder")
    return out


def read_audio(path: Path) -> tuple[np.ndarray, int]:
    import soundfile as sf

    try:
        x, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        raise AudioInputError(f"cannot read audio {path}: {e}") from None
    if not len(x):
        raise AudioInputError(f"{path} holds no audio")
    return x.mean(axis=1), sr


def synthesized(req: EvalRequest, registry) -> Iterator[tuple[str, np.ndarray, int, float, str]]:
    """(text, audio, rate, seconds spent, label) per line, made through the library API."""
    import ttscli

    pipe = ttscli.load(req.model, model_dir=req.model_dir, registry=registry, backends=req.backends,
                       random_weights=req.random_weights)
    limits = random_limits(pipe) if req.random_weights else {}
    ref_audio = ref_rate = None
    if req.ref is not None:
        from ttscli.audio import read_reference, resample

        mono, sr = read_reference(req.ref)
        ref_rate = getattr(pipe, "ref_sample_rate", pipe.sample_rate)
        ref_audio = resample(mono, sr, ref_rate)
    requests = [ttscli.Request(text=text, voice=req.voice, instruct=req.instruct, language=req.language,
                               seed=None if req.seed is None else req.seed + i, ref_audio=ref_audio,
                               ref_sample_rate=ref_rate, ref_text=req.ref_text, knobs=dict(req.knobs), **limits)
                for i, text in enumerate(req.texts)]
    # one untimed run first, as bench warms up: the first call builds MLX's compiled graphs
    for _ in ttscli.synthesize(pipe, requests[0]):
        pass
    for i, (text, request) in enumerate(zip(req.texts, requests)):
        t0 = time.perf_counter()
        audio = [np.asarray(x, np.float32).reshape(-1) for x in ttscli.synthesize(pipe, request)]
        took = time.perf_counter() - t0
        if not audio or not sum(len(a) for a in audio):
            raise UsageError(f"line {i + 1}: the model made no audio for it")
        yield text, np.concatenate(audio), pipe.sample_rate, took, f"line {i + 1}"


def random_limits(pipe) -> dict:
    """A line's frame limit at random weights, which never emit their stop: :data:`RANDOM_FRAMES`
    frames, the stop ignored, so a line ends instead of failing at the model's limit (a model
    that counts no frames, such as a VITS voice, ends by itself)."""
    from ttscli.generate import honoured
    from ttscli.models import family_of

    if "max_frames" not in honoured(pipe.spec, family_of(pipe.spec)):
        return {}
    return {"max_frames": RANDOM_FRAMES, "ignore_eos": True}


def audio_pairs(req: EvalRequest) -> list[tuple[str, Path]]:
    """(text, file) per line: --texts against the files, or a `ttscli batch` folder's manifest."""
    items = [Path(a) for a in req.audio or []]
    if len(items) == 1 and (items[0] / MANIFEST).is_file():
        if req.texts:
            raise UsageError(f"--audio {items[0]} holds a ttscli batch {MANIFEST}, which gives the texts; drop --texts")
        return manifest_pairs(items[0])
    if not req.texts:
        raise UsageError("give --texts FILE (one line per audio file), "
                         f"or --audio DIR holding a ttscli batch {MANIFEST}")
    files = audio_files(items)
    if len(files) != len(req.texts):
        raise UsageError(f"--audio gives {len(files)} file(s) for {len(req.texts)} text line(s); "
                         "give one file per line (a folder's files are taken in name order)")
    return list(zip(req.texts, files))


def manifest_pairs(folder: Path) -> list[tuple[str, Path]]:
    """The entries of a `ttscli batch` output's manifest, in its order (read only, never rewritten)."""
    path = folder / MANIFEST
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise UsageError(f"{path} is over {MAX_MANIFEST_BYTES >> 20} MiB")
    pairs = []
    for n, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            raise UsageError(f"{path} line {n} is not JSON") from None
        if (not isinstance(entry, dict) or not isinstance(entry.get("text"), str)
                or not isinstance(entry.get("path"), str)):
            raise UsageError(f"{path} line {n} lacks a text or a path")
        f = folder / entry["path"]
        if not f.is_file():
            raise UsageError(f"{path} line {n}: {f} is missing")
        pairs.append((entry["text"], f))
    if not pairs:
        raise UsageError(f"{path} lists no files")
    return pairs


def given_audio(pairs: list[tuple[str, Path]]) -> Iterator[tuple[str, np.ndarray, int, float | None, str]]:
    for text, path in pairs:
        x, sr = read_audio(path)
        yield text, x, sr, None, path.name


# ---- the run --------------------------------------------------------------------------------


@dataclass
class Totals:
    errors: Errors = field(default_factory=lambda: Errors(0, 0, 0, 0))
    mos: dict = field(default_factory=dict)
    similarity: float | None = None
    duration_s: float = 0.0
    synth_s: float | None = None

    def as_dict(self) -> dict:
        return {"wer": self.errors.wer, "cer": self.errors.cer, "words": self.errors.words,
                **{f"dnsmos_{k}": v for k, v in self.mos.items()}, "similarity": self.similarity,
                "duration_s": self.duration_s, "synth_s": self.synth_s,
                "rtf": None if self.synth_s is None else self.synth_s / max(self.duration_s, 1e-9)}


def totals(lines: list[Line]) -> Totals:
    t = Totals()
    for ln in lines:
        t.errors = t.errors + ln.errors
    t.mos = {k: float(np.mean([getattr(ln.mos, k) for ln in lines])) for k in ("sig", "bak", "ovrl", "p808")}
    sims = [ln.similarity for ln in lines if ln.similarity is not None]
    t.similarity = float(np.mean(sims)) if sims else None
    t.duration_s = float(sum(ln.duration_s for ln in lines))
    if all(ln.synth_s is not None for ln in lines):
        t.synth_s = float(sum(ln.synth_s for ln in lines))
    return t


def gate(t: Totals, req: EvalRequest) -> list[str]:
    """What failed, one phrase each (corpus WER, mean OVRL, mean similarity)."""
    failed = []
    if req.max_wer is not None and t.errors.wer > req.max_wer:
        failed.append(f"WER {t.errors.wer:.3f} > --max-wer {req.max_wer:g}")
    if req.min_mos is not None and t.mos["ovrl"] < req.min_mos:
        failed.append(f"DNSMOS OVRL {t.mos['ovrl']:.2f} < --min-mos {req.min_mos:g}")
    if req.min_sim is not None and t.similarity is not None and t.similarity < req.min_sim:
        failed.append(f"speaker similarity {t.similarity:.3f} < --min-sim {req.min_sim:g}")
    return failed


def check_request(req: EvalRequest) -> None:
    if req.audio is None and not req.texts:
        raise UsageError("give --texts FILE: one utterance per line")
    if req.min_sim is not None and req.ref is None:
        raise UsageError("--min-sim needs --ref VOICE.wav (the speaker to compare with)")
    if req.audio is None and req.ref is None and req.ref_text is not None:
        raise UsageError("--ref-text needs --ref")
    if req.random_weights and req.model_dir is not None:
        raise UsageError("--random-weights loads no checkpoint: drop --model-dir")
    for name in ("max_wer", "min_mos", "min_sim"):
        v = getattr(req, name)
        if v is not None and not np.isfinite(v):
            raise UsageError(f"--{name.replace('_', '-')} must be a number")
    if req.plot is not None and req.plot.suffix.lower() != ".png":
        raise UsageError("--plot must name a .png file")
    if req.plot is not None:
        from ttscli.outfile import check_writable

        check_writable(req.plot, "--plot")


def asr_language(req: EvalRequest, registry) -> str | None:
    """The request's language, else the model's only language; None lets Whisper detect it."""
    from ttscli.eval.asr import whisper_language

    if req.language is not None:
        return whisper_language(req.language)
    if req.audio is None:
        langs = [lang for lang in registry.resolve(req.model).languages if lang != "auto"]
        if len(langs) == 1:
            return whisper_language(langs[0])
    return None


def run_eval(req: EvalRequest, registry, on_line=None) -> dict:
    check_request(req)
    pairs = audio_pairs(req) if req.audio is not None else None     # bad files fail before any model loads
    total = len(pairs) if pairs is not None else len(req.texts)
    language = asr_language(req, registry)
    ev = Evaluator(req.asr_model_dir, req.speaker_model)
    ev.check_ready(similarity=req.ref is not None)
    ref_embedding = None
    if req.ref is not None:
        ref_audio, ref_sr = read_audio(req.ref)
        ref_embedding = ev.speaker.embed(ref_audio, ref_sr)
    source = given_audio(pairs) if pairs is not None else synthesized(req, registry)
    lines = []
    for text, audio, sr, took, label in source:
        line = ev.score(text, audio, sr, language, ref_embedding)
        line.synth_s, line.source = took, label
        lines.append(line)
        if on_line:
            on_line(len(lines), total)
    t = totals(lines)
    failed = gate(t, req)
    report = {
        "model": None if req.audio is not None else registry.resolve(req.model).id,
        "random_weights": req.random_weights,
        "asr": {"model": "whisper-base (faster-whisper, int8)", "language": language or "auto"},
        "lines": [ln.row() for ln in lines], "total": t.as_dict(),
        "thresholds": {"max_wer": req.max_wer, "min_mos": req.min_mos, "min_sim": req.min_sim},
        "failed": failed, "passed": not failed,
    }
    if req.plot is not None:
        plot(report, req.plot)
    return report


def plot(report: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'ttscli[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["lines"]
    idx = np.arange(1, len(rows) + 1)
    fig, (a, b) = plt.subplots(2, 1, figsize=(max(6, 0.35 * len(rows) + 2), 5), sharex=True)
    a.bar(idx, [100 * r["wer"] for r in rows], color="tab:red")
    a.axhline(100 * report["total"]["wer"], color="k", lw=0.8, ls="--", label="corpus WER")
    a.set_ylabel("WER (%)")
    a.legend(loc="upper right", fontsize=8)
    b.plot(idx, [r["dnsmos_ovrl"] for r in rows], "o-", label="OVRL")
    b.plot(idx, [r["dnsmos_sig"] for r in rows], "s-", ms=3, label="SIG")
    b.plot(idx, [r["dnsmos_bak"] for r in rows], "^-", ms=3, label="BAK")
    b.set_ylim(1, 5)
    b.set_ylabel("DNSMOS")
    b.set_xlabel("line")
    from matplotlib.ticker import MaxNLocator

    b.xaxis.set_major_locator(MaxNLocator(integer=True))
    b.legend(loc="lower right", fontsize=8, ncol=3)
    fig.suptitle(f"ttscli eval {report['model'] or 'audio'}: WER {100 * report['total']['wer']:.1f}%, "
                 f"OVRL {report['total']['dnsmos_ovrl']:.2f}")
    fig.tight_layout()
    import io

    from ttscli.outfile import write_bytes

    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=110)
    finally:
        plt.close(fig)
    write_bytes(path, png.getvalue(), "--plot")


def render_table(report: dict):
    from rich.table import Table
    from rich.text import Text

    sim = any(r["similarity"] is not None for r in report["lines"])
    rtf = any(r["rtf"] is not None for r in report["lines"])
    title = f"ttscli eval {report['model'] or '(audio files)'}"
    table = Table(title=title, show_lines=False, caption=(
        f"ASR {report['asr']['model']}, language {report['asr']['language']}; WER/CER after Whisper's "
        "normaliser; total WER = all errors / all reference words; MOS columns are means"))
    table.add_column("#", justify="right")
    table.add_column("text / transcript", overflow="fold", ratio=3)
    for name in (("WER", "CER", "SIG", "BAK", "OVRL", "P808") + (("sim",) if sim else ()) + ("s",)
                 + (("RTF",) if rtf else ())):
        table.add_column(name, justify="right")

    def cells(r):
        out = [f"{100 * r['wer']:.1f}%", f"{100 * r['cer']:.1f}%", f"{r['dnsmos_sig']:.2f}", f"{r['dnsmos_bak']:.2f}",
               f"{r['dnsmos_ovrl']:.2f}", f"{r['dnsmos_p808']:.2f}"]
        if sim:
            out.append("-" if r["similarity"] is None else f"{r['similarity']:.3f}")
        out.append(f"{r['duration_s']:.2f}")
        if rtf:
            out.append("-" if r["rtf"] is None else f"{r['rtf']:.3f}")
        return out

    for i, r in enumerate(report["lines"], 1):
        shown = Text(r["text"])
        if r["wer"] > 0:         # show what the ASR heard where it differs
            shown.append(f"\n-> {r['transcript']}", style="dim")
        table.add_row(str(i), shown, *cells(r))
    t = report["total"]
    table.add_section()
    table.add_row("", Text(f"total, {len(report['lines'])} lines, {t['words']} words", style="bold"),
                  *cells({**t, "text": "", "transcript": ""}))
    return table
