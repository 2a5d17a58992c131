"""Every family keeps the family contract (models/base.py), and a broken family is caught.

Each implemented family has a Case in CASES below: a model of it that runs small here (random
weights at the real size, or a tiny fixture in the published layout) through load -> speak ->
bench -> parity. A new family adds its case here; a family without one fails
`test_every_implemented_family_has_a_case`.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import ttscli  # BLAS preload before mlx
import numpy as np
import pytest

from contract import Case, declaration_problems, run_contract
from ttscli.errors import UsageError
from ttscli.generate import Request
from ttscli.models import families, family_names, get_family, register_family, unregister_family
from ttscli.models.base import Family, Knob, Pipeline
from ttscli.registry import ModelSpec, Registry, load_registry

FIX = Path(__file__).resolve().parent / "fixtures"



def _indextts2_case(tmp: Path) -> Case:
    # IndexTTS2 speaks only in a cloned voice: the request and the bench clone the front end
    # goldens' reference recording
    import soundfile as sf

    ref = np.load(FIX / "indextts2" / "frontend.npz")["ref22"]
    sf.write(tmp / "ref.wav", ref, 22050)
    return Case("indextts2", Request(text="Hello there. A second sentence.", seed=0, max_frames=8, ignore_eos=True,
                                     ref_audio=ref, ref_sample_rate=22050),
                model_dir=FIX / "indextts2" / "tiny", bench_max_frames=4, bench_ref=tmp / "ref.wav",
                golden=FIX / "indextts2" / "goldens.npz", parity_model_dir=FIX / "indextts2" / "tiny")


def _qwen3_case(tmp: Path) -> Case:
    # speak/bench need a folder whose speech decoder reads every code the talker emits (the
    # e2e fixture); parity runs on the upstream-built tiny folder its goldens came from
    from qwen3_e2e.e2e_fixture import build

    return Case("qwen3-tts-1.7b-customvoice",
                Request(text="Hello world.", voice="ryan", seed=0, max_frames=6, ignore_eos=True),
                model_dir=build("customvoice", tmp / "qwen3-customvoice"), bench_max_frames=4,
                golden=FIX / "parity" / "qwen3-tiny-customvoice.npz",
                parity_model_dir=FIX / "parity" / "qwen3-tiny-customvoice")


CASES = {
    # the tiny checkpoint in the published layout (its stored speaker, spk2info.pt, is the default
    # voice); parity on the upstream goldens of the same checkpoint
    "cosyvoice3": lambda tmp: Case("cosyvoice3-0.5b", Request(text="Hello there. A second sentence.", seed=0,
                                                              max_frames=8, ignore_eos=True),
                                   model_dir=FIX / "cosyvoice3" / "tiny", bench_max_frames=4,
                                   golden=FIX / "cosyvoice3" / "goldens.npz",
                                   parity_model_dir=FIX / "cosyvoice3" / "tiny"),
    "piper": lambda tmp: Case("piper-joe", Request(text="Hello there. A second sentence.", seed=0),
                              random_weights=True, golden=FIX / "parity" / "piper-joe.npz"),
    "qwen3_tts": _qwen3_case,
    "kokoro": lambda tmp: Case("kokoro-82m", Request(text="Hello there. A second sentence.", seed=0),
                               random_weights=True, golden=FIX / "kokoro" / "en1_kmodel.npz"),
    # the tiny checkpoint in the published layout (T3 + voice encoder + S3Gen fixtures); parity on
    # the T3 / voice-encoder goldens of chatterbox-tts 0.1.7
    "chatterbox": lambda tmp: Case("chatterbox", Request(text="Hello there. A second sentence.", seed=0, max_frames=8,
                                                         ignore_eos=True),
                                   model_dir=FIX / "chatterbox" / "tiny", bench_max_frames=4,
                                   golden=FIX / "chatterbox" / "parity_t3.npz",
                                   parity_model_dir=FIX / "chatterbox" / "tiny"),
    # the tiny checkpoint in the published layout; parity on its upstream goldens (CFG, direction)
    "breeze_tts": lambda tmp: Case("breeze-tts-2", Request(text="Hello there. A second sentence.", seed=0,
                                                           max_frames=6, ignore_eos=True),
                                   model_dir=FIX / "breeze" / "tiny", bench_max_frames=4,
                                   golden=FIX / "breeze" / "parity-direction-cfg.npz",
                                   parity_model_dir=FIX / "breeze" / "tiny"),
    # the tiny checkpoint in the published layout (its built-in voice "alba"); parity on the
    # pocket-tts 4.0.1 goldens (recorded flow noise, EOS stop, waveform)
    "pocket_tts": lambda tmp: Case("pocket-tts", Request(text="Hello there. A second sentence.", voice="alba", seed=0,
                                                         max_frames=6, ignore_eos=True),
                                   model_dir=FIX / "pocket_tts" / "tiny", bench_max_frames=4,
                                   golden=FIX / "pocket_tts" / "goldens.npz",
                                   parity_model_dir=FIX / "pocket_tts" / "tiny"),
    # the tiny checkpoint in the published layout; parity on the voxcpm 2.0.3 goldens (every
    # prompt mode with recorded diffusion noise, stop decisions, waveform, streamed chunks)
    "indextts2": _indextts2_case,
    "voxcpm2": lambda tmp: Case("voxcpm2", Request(text="Hello there. A second sentence.", seed=0, max_frames=6,
                                                   ignore_eos=True),
                                model_dir=FIX / "voxcpm2" / "tiny", bench_max_frames=4,
                                golden=FIX / "voxcpm2" / "goldens.npz", parity_model_dir=FIX / "voxcpm2" / "tiny"),
}


def test_every_implemented_family_has_a_case():
    implemented = {spec.family for spec in load_registry() if spec.implemented}
    assert implemented <= set(family_names()), "a registry entry names a family ttscli does not ship"
    assert implemented <= set(CASES), f"add a contract Case for: {sorted(implemented - set(CASES))}"


@pytest.mark.parametrize("name", sorted(family_names()))
def test_declaration(name):
    assert declaration_problems(get_family(name), families()) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_family_keeps_the_contract(name, tmp_path):
    assert run_contract(CASES[name](tmp_path)) == []


def test_family_modules_are_light():
    """The CLI reads every family.py to build its options: none may import mlx or onnxruntime."""
    import subprocess
    import sys

    code = ("import sys, ttscli.models as m; [m.get_family(n) for n in m.family_names()]; "
            "print(sorted(x for x in ('mlx.core', 'onnxruntime', 'torch') if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- a deliberately broken family is caught ------------------------------------------------

class _Tone(Pipeline):
    """A well-behaved toy pipeline: one sine chunk per request."""

    sample_rate = 16000

    def __init__(self, rate: int = 16000, dtype=np.float32, channels: int = 1):
        super().__init__()
        self.sample_rate, self.dtype, self.channels = rate, dtype, channels

    def generate(self, request):
        t = np.arange(1600) / 16000
        x = (0.1 * np.sin(2 * np.pi * 220 * t)).astype(self.dtype)
        self.stats.frames += 1
        yield x if self.channels == 1 else np.stack([x] * self.channels, axis=1)


def _toy(name: str, make, **kw) -> tuple[Family, Case]:
    fam = Family(name=name, load=lambda spec, ckpt, opts: make(), **kw)
    spec = ModelSpec(id=f"{name}-model", name=name, family=name, sample_rate=16000, implemented=True)
    reg = Registry({spec.id: spec}, default=spec.id)
    return fam, Case(spec.id, Request(text="Hi."), random_weights=True, registry=reg)


@pytest.fixture
def toy():
    made = []

    def build(name, make, **kw):
        fam, case = _toy(name, make, **kw)
        register_family(fam)
        made.append(name)
        return case

    yield build
    for name in made:
        unregister_family(name)


def test_a_well_behaved_toy_family_passes(toy):
    case = toy("toy_ok", _Tone, knobs=(Knob("pitch", float, "Pitch.", 1.0, 0.5, 2.0),))
    assert run_contract(case) == []


@pytest.mark.parametrize("defect, make, kw, expect", [
    ("stereo float64 audio", lambda: _Tone(dtype=np.float64, channels=2), {}, "not mono float32"),
    ("wrong sample rate", lambda: _Tone(rate=22050), {}, "sample_rate 22050 != registry 16000"),
    ("load returns a non-Pipeline", lambda: object(), {}, "not a Pipeline"),
    ("knob with a list type", _Tone, {"knobs": (Knob("bad", list, "Bad."),)}, "type"),
    ("knob whose default is out of range", _Tone, {"knobs": (Knob("gain", float, "Gain.", 5.0, 0.0, 1.0),)},
     "its own default is refused"),
    ("honours a field the engine does not know", _Tone, {"honours": frozenset({"pitch"})}, "unknown request fields"),
    ("declares a bench row it never reports", _Tone, {"bench_rows": (("vocoder_ms", "vocoder (ms)", "{:.1f}"),)},
     "bench row 'vocoder_ms'"),
])
def test_a_broken_family_is_caught(toy, defect, make, kw, expect):
    problems = run_contract(toy("toy_broken", make, **kw))
    assert any(expect in p for p in problems), (defect, problems)


def test_unknown_and_bad_knobs_are_refused_by_the_engine(toy):
    case = toy("toy_knobs", _Tone, knobs=(Knob("pitch", float, "Pitch.", 1.0, 0.5, 2.0),))
    from ttscli import api, synthesize

    pipe = api.load(case.model, registry=case.registry, random_weights=True)
    for knobs, msg in [({"pitch": 3.0}, "--pitch must be in"), ({"pitch": "high"}, "--pitch takes a float"),
                       ({"tempo": 1}, "has no setting --tempo")]:
        with pytest.raises(UsageError, match=msg):
            list(synthesize(pipe, Request(text="Hi.", knobs=knobs)))
    with pytest.raises(UsageError, match="cannot honour --speed"):
        list(synthesize(pipe, Request(text="Hi.", speed=1.5)))


def test_same_knob_name_must_have_one_type():
    a = Family(name="a", load=lambda *a: None, knobs=(Knob("temperature", float, "T."),))
    b = dataclasses.replace(a, name="b", knobs=(Knob("temperature", int, "T."),))
    assert any("one CLI option serves both" in p for p in declaration_problems(b, [a, b]))


# ---- layering: what a family may import ---------------------------------------------------

PACKAGE = Path(ttscli.__file__).parent
# the engine and the commands over it; ttscli.parity is the parity command (families take Check and
# the metrics from models/base.py)
ENGINE = ("ttscli.generate", "ttscli.api", "ttscli.cli", "ttscli.serve", "ttscli.batch", "ttscli.bench",
          "ttscli.parity")


def imported_modules(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every module a file of the ttscli package (at ``root``) imports, at module level or inside
    functions, relative imports resolved; ``from a import b`` counts as ``a`` and ``a.b`` (b may
    be a module)."""
    package = ("ttscli",) + path.relative_to(root).parts[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = (package[:len(package) - node.level + 1] if node.level else ()) + \
                (tuple(node.module.split(".")) if node.module else ())
            base = ".".join(parts)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _sees_every_import_form(tmp: Path) -> bool:
    """imported_modules finds the engine however a family would import it (so a scan that finds
    nothing means something)."""
    pkg = tmp / "ttscli" / "models" / "fam"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text("import ttscli.cli\nfrom ttscli import bench\nfrom ..base import Request\n"
                                "def f():\n    from ttscli.generate import check_request\n"
                                "    from ttscli.parity import Check\n")
    got = imported_modules(pkg / "mod.py", tmp / "ttscli")
    return {"ttscli.cli", "ttscli.bench", "ttscli.models.base", "ttscli.generate", "ttscli.parity"} <= got


def test_families_do_not_import_the_engine(tmp_path):
    """The family contract (models/base.py: Family, Pipeline, Request, Stats, chunk_requests, and
    for parity Check, cosine, max_abs, rel_l2) is all a family needs from above it: no module
    under ttscli/models imports the engine or the commands over it, ttscli.parity included (at
    module level or inside a function), so the layers of docs/ARCHITECTURE.md hold."""
    assert _sees_every_import_form(tmp_path)
    bad = []
    for path in sorted((PACKAGE / "models").rglob("*.py")):
        for name in sorted(imported_modules(path)):
            if any(name == e or name.startswith(e + ".") for e in ENGINE):
                bad.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert bad == []


def test_layers_do_not_reach_into_families():
    """A family never imports another family (what two share lives in a shared module), and the
    shared layers (codecs/, nn/, lm/, backends/) import no family."""
    family_pkgs = {p.name for p in (PACKAGE / "models").iterdir() if (p / "__init__.py").is_file()}
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).parts
        own = rel[1] if rel[0] == "models" and len(rel) > 2 else None
        shared = rel[0] in ("codecs", "nn", "lm", "backends")
        for name in sorted(imported_modules(path)):
            parts = name.split(".")
            if parts[:2] != ["ttscli", "models"] or len(parts) < 3 or parts[2] not in family_pkgs:
                continue
            if shared or (own is not None and parts[2] != own):
                bad.append(f"{'/'.join(rel)} imports {'.'.join(parts[:3])}")
    assert bad == []


def test_shared_codecs_sit_outside_the_families():
    """A codec two lineages share lives in codecs/ on its own, so a second user takes it without
    importing the first: S3Gen (Chatterbox's token-to-wav, CosyVoice's lineage) and Mimi (the
    Qwen3-TTS 12 Hz tokenizer's encoder; Pocket TTS and others use Mimi)."""
    assert not (PACKAGE / "models" / "chatterbox" / "s3gen").exists()
    assert (PACKAGE / "codecs" / "s3gen" / "__init__.py").is_file()
    assert "ttscli.codecs.s3gen" in imported_modules(PACKAGE / "models" / "chatterbox" / "load.py")
    mimi = PACKAGE / "codecs" / "mimi"
    assert (mimi / "__init__.py").is_file()
    assert "ttscli.codecs.mimi" in imported_modules(PACKAGE / "codecs" / "qwen3_12hz" / "encoder.py")
    tokenizer = [f"{p.name} imports {n}" for p in sorted(mimi.rglob("*.py")) for n in sorted(imported_modules(p))
                 if n.startswith("ttscli.codecs.qwen3_12hz")]
    assert tokenizer == []


def _hook_module(fn) -> str:
    """The module a Family hook's code lives in: hook()'s target, or a function's own module."""
    doc = fn.__doc__ or ""
    if doc.endswith(" (imported on first call)"):
        return doc.split(":", 1)[0]
    return fn.__module__


def _family_dirs() -> list[Path]:
    return sorted(p for p in (PACKAGE / "models").iterdir() if (p / "family.py").is_file())


@pytest.mark.parametrize("folder", _family_dirs(), ids=lambda p: p.name)
def test_every_family_has_one_layout(folder):
    """docs/ADDING_A_FAMILY.md's layout: the same files with the same roles in every family, the
    load hook in load.py, and an __init__.py of a docstring and lazy re-exports only."""
    name = folder.name
    missing = [f for f in ("family.py", "load.py", "pipeline.py", "parity.py") if not (folder / f).is_file()]
    assert missing == []
    family = get_family(name)
    assert family.load.__doc__ == f"ttscli.models.{name}.load:load_pipeline (imported on first call)"
    defined = [n.name for n in ast.parse((folder / "__init__.py").read_text(encoding="utf-8")).body
               if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert defined == [], f"{name}/__init__.py defines {defined}: it re-exports, the code lives by role"
    bench = [h for h in (family.bench_components, *family.peers.values()) if h is not None]
    assert {_hook_module(h) for h in bench} <= {f"ttscli.models.{name}.bench"}
    if "mlx" in family.convert:
        assert _hook_module(family.convert["mlx"]) == f"ttscli.models.{name}.convert"
