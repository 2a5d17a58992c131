"""Write docs/cli.md, the command reference, from the Typer app in ttscli/cli.py.

    python scripts/gen_cli_docs.py            # rewrite docs/cli.md
    python scripts/gen_cli_docs.py --check    # exit 1 if docs/cli.md differs from what the app gives

The page is built from the app's own command and parameter objects (names, flags, help, defaults, types,
ranges), never from rendered ``--help`` text, so it does not depend on the terminal's width or colours
and cannot drift from the code: tests/test_docs.py regenerates it and compares.
"""
from __future__ import annotations

import argparse
import enum
import re
import sys
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "cli.md"
REGENERATE = "python scripts/gen_cli_docs.py"

# Rich style tags the app's help texts use for emphasis; anything else in brackets (``ttscli[eval]``) is text,
# escaped there as rich wants it (``ttscli\[eval]``) so that a terminal shows it.
STYLE_TAG = re.compile(r"(?<!\\)(?:\[/?(?:bold|italic|dim|underline|b|i|u)\]|\[/\])")
BOLD_SPAN = re.compile(r"\[bold\](.+?)\[/bold\]")
TYPE_NAMES = {str: "text", int: "integer", float: "number", bool: "boolean", Path: "path"}
# click's type names as Typer's releases spell them, in the words of TYPE_NAMES
CLICK_NAMES = {"str": "text", "string": "text", "int": "integer", "int range": "integer", "integer range": "integer",
               "float": "number", "float range": "number", "bool": "boolean", "directory": "path", "file": "path"}


def plain(text: str | None) -> str:
    """Help text as one line of plain text: rich style tags dropped, escaped brackets unescaped,
    whitespace folded."""
    return " ".join(STYLE_TAG.sub("", text or "").replace("\\[", "[").split())


def cell(text: str) -> str:
    """Escape text for a markdown table cell; code spans (`...`) are kept as they are."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = (parts[i].replace("\\", "\\\\").replace("<", "&lt;").replace(">", "&gt;")
                    .replace("*", "\\*").replace("_", "\\_"))
    return "`".join(parts).replace("|", "\\|")


def code(text: str) -> str:
    return f"`{text}`"


def annotation_of(param) -> typing.Any:
    """The parameter's Python type where Typer records it (Typer >= 0.20), else None."""
    descriptor = getattr(param, "type_descriptor", None)
    return getattr(descriptor, "annotation", None)


def base_type(annotation) -> typing.Any:
    """Unwrap Optional[X] and List[X] to X."""
    while typing.get_origin(annotation) in (typing.Union, types.UnionType, list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = args[0] if args else str
    return annotation


def choices_of(param) -> list[str] | None:
    click_type = getattr(param, "type", None)
    if click_type is not None and hasattr(click_type, "choices"):
        return [str(getattr(c, "value", c)) for c in click_type.choices]
    kind = base_type(annotation_of(param))
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return [str(member.value) for member in kind]
    return None


def bounds_of(param) -> tuple:
    click_type = getattr(param, "type", None)
    if click_type is not None and hasattr(click_type, "min"):
        return click_type.min, click_type.max
    return getattr(param, "min", None), getattr(param, "max", None)


def type_name(param) -> str:
    """What the parameter takes, in words: flag, text, integer (>= 1), one of a | b, ..."""
    if getattr(param, "is_flag", False):
        return "flag"
    choices = choices_of(param)
    if choices:
        return "one of " + ", ".join(code(c) for c in choices)
    click_type = getattr(param, "type", None)
    if click_type is not None:
        name = CLICK_NAMES.get(click_type.name, click_type.name)
    else:
        kind = base_type(annotation_of(param))
        name = TYPE_NAMES.get(kind, getattr(kind, "__name__", "text"))
    low, high = bounds_of(param)
    if low is not None and high is not None:
        name += f" ({low} to {high})"
    elif low is not None:
        name += f" (at least {low})"
    elif high is not None:
        name += f" (at most {high})"
    if getattr(param, "multiple", False):
        name += ", repeatable"
    return name


def default_of(param) -> str:
    if getattr(param, "required", False):
        return "required"
    value = param.default
    if callable(value):
        return ""
    if getattr(param, "is_flag", False) and getattr(param, "secondary_opts", None) == []:
        return "on" if value else "off"
    if value is None or value == "" or value == [] or value == ():
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    return code(str(value))


def flags_of(param) -> str:
    names = ", ".join(code(o) for o in param.opts)
    if getattr(param, "secondary_opts", None):
        names += " / " + ", ".join(code(o) for o in param.secondary_opts)
    return names


def description_of(param) -> str:
    text = plain(getattr(param, "help", None))
    envvar = getattr(param, "envvar", None)
    if envvar:
        text += f" Environment: {', '.join(code(e) for e in ([envvar] if isinstance(envvar, str) else envvar))}."
    return text


def usage_of(name: str, command) -> str:
    pieces = [f"ttscli {name}", "[OPTIONS]"]
    for param in command.params:
        if is_argument(param):
            token = param.name.upper() + ("..." if param.nargs == -1 else "")
            pieces.append(token if param.required else f"[{token}]")
    return " ".join(pieces)


def is_argument(param) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def param_table(params, first_column: str) -> list[str]:
    lines = [f"| {first_column} | Takes | Default | Description |", "|---|---|---|---|"]
    for param in params:
        first = code(param.name.upper()) if is_argument(param) else flags_of(param)
        lines.append(f"| {first} | {cell(type_name(param))} | {default_of(param)} | {cell(description_of(param))} |")
    return lines


def command_section(name: str, command) -> list[str]:
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    arguments = [p for p in params if is_argument(p)]
    panels: dict[str, list] = {}
    for param in params:
        if not is_argument(param):
            panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(param)
    lines = [f"## ttscli {name}", "", plain(command.help), "", "```", usage_of(name, command), "```", ""]
    if command.epilog:  # the app's examples, in bold on a terminal: code spans here
        lines += [plain(BOLD_SPAN.sub(r"`\1`", command.epilog)), ""]
    if arguments:
        lines += ["**Arguments**", "", *param_table(arguments, "Argument"), ""]
    for panel, members in panels.items():
        lines += [f"**{plain(panel)}**", "", *param_table(members, "Option"), ""]
    return lines


def render(app) -> str:
    """The whole page for a Typer app, as markdown."""
    import typer

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    names = [n for n in group.list_commands(ctx) if not group.get_command(ctx, n).hidden]
    root_opts = [p for p in group.params if not getattr(p, "hidden", False)]
    lines = [
        "# Command reference",
        "",
        "<!-- Generated from the Typer app in ttscli/cli.py by scripts/gen_cli_docs.py: do not edit by hand. "
        f"Regenerate with `{REGENERATE}`. -->",
        "",
        plain(group.help),
        "",
        "Every command also takes `-h` / `--help`. Errors are one line on stderr; the exit codes are in",
        "[the usage guide](usage.md#exit-codes).",
        "",
        "| Command | What it does |",
        "|---|---|",
    ]
    for name in names:
        lines.append(f"| [`ttscli {name}`](#ttscli-{name}) | {cell(plain(group.get_command(ctx, name).help))} |")
    lines.append("")
    if root_opts:
        lines += ["Options of `ttscli` itself:", "", *param_table(root_opts, "Option"), ""]
    for name in names:
        lines += command_section(name, group.get_command(ctx, name))
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale instead of writing it")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from ttscli.cli import app

    page = render(app)
    if args.check:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != page:
            print(f"docs/cli.md is stale: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(page, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
