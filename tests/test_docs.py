"""The documentation stays true to the code: the command reference is regenerated and compared."""
from __future__ import annotations

import difflib
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
