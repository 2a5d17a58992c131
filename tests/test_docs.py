"""The documentation stays true to the code: the command reference is regenerated and compared."""
from __future__ import annotations

import difflib
import re
import importlib.util
from pathlib import Path
from typing import Optional

import typer

ROOT = Path(__file__).resolve().parents[1]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current():
    from ttscli.cli import app

    gen = load_generator()
    expected = gen.render(app)
    committed = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    if committed != expected:
        diff = "".join(list(difflib.unified_diff(committed.splitlines(True), expected.splitlines(True),
                                                 "docs/cli.md (committed)", "docs/cli.md (from the app)"))[:40])
        raise AssertionError(f"docs/cli.md is stale: run `{gen.REGENERATE}` and commit the result\n{diff}")


def demo_app(with_pitch: bool) -> typer.Typer:
    """A one-command app, with or without a --pitch option added."""
    app = typer.Typer()

    def speak(text: str = typer.Argument(..., help="What to say."),
              seed: int = typer.Option(7, "--seed", min=0, help="Random seed.")):
        """Speak."""

    def speak_with_pitch(text: str = typer.Argument(..., help="What to say."),
                         seed: int = typer.Option(7, "--seed", min=0, help="Random seed."),
                         pitch: Optional[float] = typer.Option(None, "--pitch", max=2.0, help="Pitch | shift.")):
        """Speak."""

    app.command("speak")(speak_with_pitch if with_pitch else speak)
    app.command("models")(lambda: None)
    return app


def test_reference_shows_each_option_with_its_help_default_and_range():
    gen = load_generator()
    page = gen.render(demo_app(with_pitch=True))
    assert "| `--seed` | integer (at least 0) | `7` | Random seed. |" in page
    assert "| `--pitch` | number (at most 2.0) |  | Pitch \\| shift. |" in page
    assert "| `TEXT` | text | required | What to say. |" in page
    assert "--pitch" not in gen.render(demo_app(with_pitch=False))


def test_readme_is_a_short_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: keep it a guide of at most 250, detail in docs/"


# "session" is allowed where it names an onnxruntime (or pytest) session object, never a run of work
SESSION_OBJECT = re.compile(r"onnxruntime|component_session|pytest", re.IGNORECASE)
NARRATIVE = re.compile(r"session|engineer|load average", re.IGNORECASE)


def test_docs_speak_of_the_project_only():
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = NARRATIVE.search(line)
            if match and not (match.group(0).lower() == "session" and SESSION_OBJECT.search(line)):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "narrative about who ran what (state the condition instead):\n" + "\n".join(found)


def nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_site_nav_covers_every_page():
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    on_disk = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(listed) == on_disk


# in the package's comments and docstrings: "session" only where the module holds session objects
# (onnxruntime's, or a process started in a session of its own), never a run of work
SESSION_OBJECT_MODULE = re.compile(r"onnxruntime|InferenceSession|start_new_session")
MACHINE_FIGURE = re.compile(r"EPYC|H200|load average", re.IGNORECASE)
BENCHMARK_ANCHOR = re.compile(r"docs/benchmarks\.md#([\w.-]+)")


def comment_lines(path: Path):
    """(line number, text) of every comment and docstring line of a Python file."""
    import io
    import tokenize

    statement_start = True
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
        elif tok.type == tokenize.STRING and statement_start:
            for offset, text in enumerate(tok.string.splitlines()):
                yield tok.start[0] + offset, text
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            statement_start = tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)


def test_code_comments_speak_of_the_project_only():
    """No narrative about who ran what and no machine figures in ttscli's comments and docstrings:
    a figure lives in docs/benchmarks.md with its command, machine and date, and the comment that
    cites it names an entry that exists."""
    anchors = set(re.findall(r"\{#([\w.-]+)\}", (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")))
    found = []
    for path in sorted((ROOT / "ttscli").rglob("*.py")):
        sessions_are_objects = bool(SESSION_OBJECT_MODULE.search(path.read_text(encoding="utf-8")))
        for number, line in comment_lines(path):
            where = f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
            match = NARRATIVE.search(line)
            if match and not (match.group(0).lower() == "session" and sessions_are_objects):
                found.append(f"narrative: {where}")
            if MACHINE_FIGURE.search(line):
                found.append(f"machine figure (move it to docs/benchmarks.md): {where}")
            found += [f"no such entry #{a} in docs/benchmarks.md: {where}"
                      for a in BENCHMARK_ANCHOR.findall(line) if a not in anchors]
    assert not found, "comments and docstrings under ttscli/:\n" + "\n".join(found)
