"""Small CLI promises: a mistyped model gets a suggestion, `models` shows the short names -m
takes and each model's default voice, `batch --format` offers every format ttscli writes, the
progress bar shows no "0/None"."""
from __future__ import annotations

import io
import json

import pytest
import soundfile as sf
from clitools import only_line
from rich.console import Console

from ttscli.audio_formats import FORMATS


def test_mistyped_model_gets_did_you_mean(run_cli):
    p = run_cli("speak", "Hi.", "-m", "piper-jo", "-o", "x.wav")
    assert p.returncode != 0
    assert "unknown model 'piper-jo'; did you mean piper-joe?" in only_line(p.err)
    p = run_cli("speak", "Hi.", "-m", "nothing-like-it", "-o", "x.wav")
    assert p.returncode != 0 and "did you mean" not in only_line(p.err)


def test_models_table_names_the_kokoro_alias(run_cli):
    p = run_cli("models", env={"COLUMNS": "80"})
    assert p.returncode == 0, p.err
    table = " ".join(p.stdout.decode().split())
    assert "kokoro = kokoro-82m" in table and "joe = piper-joe" in table


def test_models_shows_the_default_voice_per_language(run_cli):
    from ttscli.registry import load_registry

    assert load_registry().resolve("kokoro-82m").default_voices == {"": "jf_alpha", "en": "jf_gongitsune"}
    assert load_registry().resolve("piper-joe").default_voices == {}
    p = run_cli("models", "kokoro-82m", env={"COLUMNS": "120"})
    assert p.returncode == 0, p.err
    assert "default voice jf_gongitsune (en), jf_alpha (other languages)" in " ".join(p.stdout.decode().split())


def test_batch_format_help_lists_every_format(run_cli):
    p = run_cli("batch", "--help", env={"COLUMNS": "200"})
    assert p.returncode == 0
    assert ", ".join(FORMATS) in " ".join(p.stdout.decode().split())


@pytest.mark.parametrize("fmt", ["opus", "aac"])
def test_batch_writes_a_format_beyond_the_old_four(run_cli, tmp_path, fmt):
    (tmp_path / "rows.jsonl").write_text(json.dumps({"id": "a", "text": "Hello there."}) + "\n")
    p = run_cli("batch", "rows.jsonl", "-o", "out", "--format", fmt)
    assert p.returncode == 0, p.err
    [written] = [q for q in (tmp_path / "out").rglob(f"a.{fmt}")]
    if fmt == "opus":
        assert sf.info(str(written)).duration > 0.3
    else:
        assert written.read_bytes()[:2] in (b"\xff\xf1", b"\xff\xf9")   # ADTS sync word


def test_progress_shows_no_count_before_the_first_chunk(monkeypatch):
    from ttscli import cli

    out = io.StringIO()
    monkeypatch.setattr(cli, "err", Console(file=out, force_terminal=True, width=100))
    monkeypatch.setattr(cli.State, "quiet", False)
    prog, cb = cli.progress_callback("speaking")

    def shown() -> str:
        out.seek(0), out.truncate()
        cli.err.print(prog.get_renderable())
        return out.getvalue()

    assert "None" not in shown() and "chunks" not in shown()
    cb(1, 3)
    assert "1/3 chunks" in shown()


def test_help_keeps_bracketed_words_like_pip_extras():
    """`ttscli[eval]` in an option's help is text, not rich markup: every command's help shows it."""
    import re

    from typer.main import get_command
    from typer.testing import CliRunner

    from ttscli.cli import app

    root = get_command(app)
    bracketed = re.compile(r"\w+\\?\[[\w,.-]+\]")
    checked = 0
    for name, cmd in root.commands.items():
        wanted = {m.replace("\\", "") for p in cmd.params for m in bracketed.findall(getattr(p, "help", None) or "")}
        if not wanted:
            continue
        shown = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "400"}).output
        for w in wanted:
            assert w in shown, f"`ttscli {name} --help` lost {w!r}"
            checked += 1
    assert checked, "no option help names a bracketed word any more; this test checks nothing"
