"""`ttscli bench` as a user reads it: the default table, -v, and options refused before any run."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from ttscli.bench import BenchRequest, render, run_bench
from ttscli.errors import UsageError
from ttscli.registry import load_registry


def table_labels(renderable) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(renderable)
    return [line.split("│")[1].strip() for line in out.getvalue().splitlines() if line.count("│") > 2]


@pytest.fixture(scope="module")
def piper_report():
    out = io.StringIO()
    report = run_bench(BenchRequest(repeats=1, warmup=0, backends=[]), load_registry(),
                       console=Console(file=out, width=200, color_system=None))
    return report, out.getvalue()


def test_default_table_shows_what_a_user_reads(piper_report):
    report, printed = piper_report
    shown = [line.split("│")[1].strip() for line in printed.splitlines() if line.count("│") > 2]
    assert shown == ["load (s)", "first audio (s)", "real-time factor", "RSS peak (MB)"]
    (fig,) = report["variants"].values()
    # the JSON keeps every figure, those the table leaves out or that mean nothing here included
    assert fig["mlx_peak_mb"] == 0 and {"phonemize_s", "flow_decoder_s", "sentences", "workers"} <= set(fig)


def test_verbose_table_adds_internal_rows_but_not_what_does_not_apply(piper_report):
    report, _ = piper_report
    shown = table_labels(render(report, verbose=True))
    assert {"phonemize (s)", "flow + HiFi-GAN (s)", "synthesis (s)", "workers"} <= set(shown)
    assert "MLX peak (MB)" not in shown            # this run held no MLX memory


def test_a_cuda_row_shows_only_where_mlx_runs_on_cuda(piper_report):
    report, _ = piper_report
    (name,) = report["variants"]
    cuda_row = ["one_kernel", "as one CUDA kernel", "{:.0f}", "cuda"]
    for on_cuda in (False, True):
        r = {**report, "rows": [*report["rows"], cuda_row], "environment": {**report["environment"], "cuda": on_cuda},
             "variants": {name: {**report["variants"][name], "one_kernel": float(on_cuda)}}}
        assert ("as one CUDA kernel" in table_labels(render(r, verbose=True))) == on_cuda


@pytest.mark.parametrize("kw,needle", [
    ({"plot": "x.png"}, "piper-joe makes whole sentences, not frames one by one: drop --plot"),
    ({"ref": "me.wav", "ref_text": "Hello."}, "piper-joe cannot clone voices; drop --ref"),
    ({"ref_text": "Hello."}, "--ref-text goes with --ref"),
])
def test_options_that_cannot_apply_are_refused_before_any_run(tmp_path, kw, needle):
    kw = {k: tmp_path / v if k in ("plot", "ref") else v for k, v in kw.items()}
    with pytest.raises(UsageError) as e:
        run_bench(BenchRequest(repeats=1, warmup=0, backends=[], **kw), load_registry())
    assert needle in str(e.value)
    assert list(tmp_path.iterdir()) == []
