"""Cold start: `ttscli --help` imports none of the numeric libraries and builds no command, a
`ttscli speak` with the embedded voice on onnxruntime imports neither mlx nor onnx, and
`ttscli bench --cold` times both sides (ttscli and piper-tts) as whole processes."""
import json
import os
import subprocess
import sys

import pytest

from ttscli import bench
from ttscli.errors import UsageError
from ttscli.registry import load_registry

HEAVY = ("numpy", "mlx", "mlx.core", "onnxruntime", "onnx", "soundfile", "ml_dtypes")
# what only a command's own help or run needs: typer's rich help (rich's markdown and traceback
# modules with it), the console on stderr, the model families (their knobs), and secrets (hmac,
# OpenSSL) for the names of partial files
DEFERRED = ("typer.rich_utils", "rich.markdown", "rich.traceback", "rich.console", "ttscli.models", "secrets")

DRIVER = """
import json, sys
from ttscli.cli import main
rc = main(sys.argv[2:])
print(json.dumps({"rc": rc, "heavy": sorted(m for m in sys.argv[1].split(",") if m in sys.modules)}),
      file=sys.stderr)
"""


def imported(args, tmp_path, modules=HEAVY):
    """Run the CLI with ``args`` in a fresh interpreter; (exit code, which of ``modules`` it imported)."""
    env = {"TTSCLI_CACHE": str(tmp_path / "cache"), "TTSCLI_CONFIG_DIR": str(tmp_path / "config")}
    p = subprocess.run([sys.executable, "-c", DRIVER, ",".join(modules), *args], capture_output=True, text=True,
                       timeout=300, env={**os.environ, **env}, cwd=tmp_path)
    got = json.loads(p.stderr.strip().splitlines()[-1])
    return got["rc"], set(got["heavy"])


def test_help_imports_no_numeric_library(tmp_path):
    assert imported(["--help"], tmp_path) == (0, set())


@pytest.mark.parametrize("args", [["--help"], ["-h"], []], ids=["--help", "-h", "no-args"])
def test_top_level_help_leaves_the_commands_unbuilt(tmp_path, args):
    assert imported(args, tmp_path, DEFERRED) == (0, set())


def test_a_command_is_built_when_it_runs_or_shows_its_help_the_same_as_typer_builds_it():
    import typer
    from typer.main import get_command
    from typer.models import CommandInfo

    from ttscli.cli import app, command_tree

    group, eager = command_tree(), get_command(app)
    ctx = typer.Context(group)

    def built() -> list:
        return [n for n, entry in group.commands.entries.items() if not isinstance(entry, CommandInfo)]

    listing = " ".join(group.get_help(ctx).split())
    with pytest.raises(click_usage_error(), match="Did you mean 'speak'"):
        group.resolve_command(ctx, ["speek"])
    assert group.list_commands(ctx) == eager.list_commands(ctx)
    assert built() == []
    for name in eager.list_commands(ctx):
        first = " ".join(eager.get_command(ctx, name).help.split("\n\n")[0].split())
        assert f"{name} {first}" in listing
    speak = group.get_command(ctx, "speak")
    assert built() == ["speak"]
    assert [p.opts for p in speak.params] == [p.opts for p in eager.get_command(ctx, "speak").params]
    assert any(p.opts == ["--temperature"] for p in speak.params)  # a model family's knob


def click_usage_error() -> type:
    """typer >= 0.16 vendors click; older versions raise click's own classes."""
    try:
        from typer._click.exceptions import UsageError
    except ImportError:  # pragma: no cover
        from click.exceptions import UsageError
    return UsageError


def test_speak_with_the_embedded_voice_imports_neither_mlx_nor_onnx(tmp_path):
    pytest.importorskip("onnxruntime")
    args = ["speak", "Hello.", "--backend", "vits=onnx", "-o", str(tmp_path / "out.wav")]
    imported(args, tmp_path)                     # the first run keeps the seeded graph in the cache
    rc, heavy = imported(args, tmp_path)
    assert rc == 0 and (tmp_path / "out.wav").stat().st_size > 44
    assert "onnxruntime" in heavy
    assert not heavy & {"mlx", "mlx.core", "onnx", "ml_dtypes"}


def test_cold_refuses_a_model_piper_cannot_run():
    with pytest.raises(UsageError, match="--cold compares with piper-tts, which runs Piper voices; "
                                         "qwen3-tts-0.6b-base is a qwen3_tts model"):
        bench.run_cold(bench.ColdRequest(model="qwen3-tts-0.6b-base"), load_registry())


def test_bench_cold_times_ttscli_and_piper(run_cli):
    pytest.importorskip("piper")
    p = run_cli("bench", "--cold", "-n", "2", "--warmup", "0", "--json", "-q", timeout=600)
    assert p.returncode == 0, p.err
    report = json.loads(p.stdout)
    assert report["model"] == "piper-joe" and report["runs"] == 2
    assert set(report["sides"]) == set(bench.COLD_SIDES)
    for side in report["sides"].values():
        assert len(side["wall_s"]) == len(side["cpu_s"]) == 2
        assert all(w > 0 for w in side["wall_s"]) and all(c > 0 for c in side["cpu_s"])
        assert side["min_s"] <= side["median_s"] <= side["max_s"]
    assert " speak Hello. -m piper-joe -o " in report["commands"]["ttscli speak"]
    piper = report["commands"]["piper"].split()
    assert piper[1] == "-m" and piper[2].endswith(".onnx")
    assert report["speak_vs_piper"]["wall"] > 0 and report["speak_vs_piper"]["cpu"] > 0


def test_the_blas_loads_at_the_first_import_of_mlx_and_not_before():
    from ttscli import _blas

    if not sys.platform.startswith("linux") or not (_blas.mkl_library() or any(map(os.path.exists, _blas.OPENBLAS))):
        pytest.skip("needs Linux with MKL or OpenBLAS installed")
    pytest.importorskip("mlx.core")
    probe = ("import ttscli; from ttscli import _blas; print(_blas.loaded is None); "
             "import mlx.core; print(_blas.loaded is not None)")
    env = {**os.environ, "TTSCLI_BLAS": "mkl" if _blas.mkl_library() else "openblas"}
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert p.stdout.split() == ["True", "True"], p.stderr
