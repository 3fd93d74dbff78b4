"""Line charts of a rate sweep (issue 46 item 5): one line per configuration, never one
legend entry per rate; titles that name the y plotted and are not cut off; error bars from
two seeds that never reach below zero; a chart with x: arrivals.time_scale drawn; what would
crash a chart found by `pagesim validate`."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from pagesim.cli import main
from pagesim.experiments.chart_base import ChartContext
from pagesim.experiments.charts import CHART_KINDS
from pagesim.experiments.validate import parse_experiment

#: every line chart, and the x it takes to be a rate sweep
LINE_KINDS = ["latency_vs_rate", "goodput_vs_rate", "latency_vs_block_size",
              "swap_vs_recompute", "sharing_savings"]  # fmt: skip
RATES = [1.0, 2.0, 4.0]


def _ctx(tmp_path, grid: dict, chart: dict, *, ci: float = 0.0):
    doc = {"name": "sweep", "base": {}, "sweep": {"grid": grid}, "charts": [chart],
           "seeds": [0, 1]}  # fmt: skip
    spec = parse_experiment(doc, "t")
    rows = []
    keys = list(grid)
    for i, combo in enumerate(itertools.product(*grid.values())):
        values = dict(zip(keys, combo, strict=True))
        label = "+".join(str(v) for v in combo)
        y = 0.1 * values["arrivals.rate_req_s"]
        rows.append({"point": f"p{i:03d}", "label": label, **values,
                     "normalized_latency_s_per_tok": y, "normalized_latency_s_per_tok_ci95": ci,
                     "request_goodput": y, "mem_sharing_saved_frac": y, "ttft_s_p99": y})  # fmt: skip
    return ChartContext(spec, pd.DataFrame(rows), tmp_path), spec.charts[0]


def _lines(fig):
    """(label, number of points) of each data line drawn (not the SLO diagonal)."""
    out = []
    for ax in fig.axes:
        handles, labels = ax.get_legend_handles_labels()
        out += [(label, len(h[0].get_xdata()) if isinstance(h, tuple) else len(h.get_xdata()))
                for h, label in zip(handles, labels, strict=True) if label != "offered rate"]  # fmt: skip
    return out


@pytest.mark.parametrize("kind", LINE_KINDS)
def test_a_rate_sweep_draws_one_line_per_configuration(tmp_path, kind):
    grid = {"arrivals.rate_req_s": RATES, "allocator.block_size": [8, 16]}
    ctx, chart = _ctx(tmp_path, grid, {"kind": kind, "x": "arrivals.rate_req_s"})
    fig = CHART_KINDS[kind](ctx, chart)
    assert sorted(_lines(fig)) == [("16", 3), ("8", 3)]  # the block sizes, not the rates


@pytest.mark.parametrize("kind", LINE_KINDS)
def test_a_sweep_of_the_rate_alone_is_one_line_without_a_dummy_axis(tmp_path, kind):
    ctx, chart = _ctx(
        tmp_path, {"arrivals.rate_req_s": RATES}, {"kind": kind, "x": "arrivals.rate_req_s"}
    )
    fig = CHART_KINDS[kind](ctx, chart)
    data = [
        line
        for line in fig.axes[0].get_lines()
        if len(line.get_xdata()) == len(RATES) and line.get_linestyle() != "None"  # not caps
    ]
    assert len(data) == 1 and list(data[0].get_xdata()) == RATES
    assert [label for label, _ in _lines(fig)] == []  # no legend entry per rate


def test_the_title_names_the_y_plotted(tmp_path):
    ctx, chart = _ctx(tmp_path, {"arrivals.rate_req_s": RATES},
                      {"kind": "latency_vs_rate", "y": "ttft_s_p99"})  # fmt: skip
    fig = CHART_KINDS["latency_vs_rate"](ctx, chart)
    title = fig._suptitle.get_text()
    assert "p99 time to first token vs request rate" in title and "normalized" not in title
    ctx, chart = _ctx(tmp_path, {"arrivals.rate_req_s": RATES}, {"kind": "latency_vs_rate"})
    assert (
        "normalized latency vs request rate"
        in CHART_KINDS["latency_vs_rate"](ctx, chart)._suptitle.get_text()
    )


@pytest.mark.parametrize("kind", ["goodput_vs_rate", "latency_vs_rate"])
def test_the_title_fits_in_the_figure(tmp_path, kind):
    ctx, chart = _ctx(tmp_path, {"arrivals.rate_req_s": RATES}, {"kind": kind})
    ctx.spec.__dict__["name"] = "an-experiment-with-a-rather-long-name-for-its-charts"
    fig = CHART_KINDS[kind](ctx, chart)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    box = fig._suptitle.get_window_extent(canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width


def test_error_bars_from_two_seeds_never_reach_below_zero(tmp_path):
    ctx, chart = _ctx(tmp_path, {"arrivals.rate_req_s": RATES}, {"kind": "latency_vs_rate"}, ci=5.0)
    fig = CHART_KINDS["latency_vs_rate"](ctx, chart)
    ax = fig.axes[0]
    lows = [seg[:, 1].min() for coll in ax.collections for seg in coll.get_segments()]
    highs = [seg[:, 1].max() for coll in ax.collections for seg in coll.get_segments()]
    assert lows and min(lows) >= 0 and max(highs) == pytest.approx(0.4 + 5.0)


TRACE = "".join(f"{0.3 * i},{40 + 7 * i % 200},{10 + 3 * i % 80}\n" for i in range(40))


def test_goodput_against_time_scale_is_drawn_and_validate_passes(tmp_path, capsys):
    (tmp_path / "trace.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + TRACE)
    (tmp_path / "exp.yaml").write_text(
        "name: ts\nbase:\n  hardware: {kv_slots: 8000}\n"
        f"  workload: {{name: csv, path: {tmp_path / 'trace.csv'}, num_requests: null}}\n"
        "  arrivals: {process: replay}\nsweep:\n  grid:\n    arrivals.time_scale: [1.0, 2.0]\n"
        "slo: {ttft_ms: 1000, tpot_ms: 100}\ncharts:\n"
        "  - {kind: goodput_vs_rate, x: arrivals.time_scale}\n"
        "  - {kind: latency_vs_rate, x: arrivals.time_scale}\n"
    )
    assert main(["validate", str(tmp_path / "exp.yaml")]) == 0
    assert main(["run", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "goodput_vs_rate.png").is_file()
    assert "warning" not in capsys.readouterr().err


def test_validate_finds_what_would_crash_a_chart(tmp_path, capsys, monkeypatch):
    from pagesim.experiments import charts

    def broken(ctx, chart):
        return ctx.results["no such column"]

    monkeypatch.setitem(charts.CHART_KINDS, "latency_vs_rate", broken)
    (tmp_path / "exp.yaml").write_text(
        "name: t\nbase: {hardware: {kv_slots: 8000}, workload: {num_requests: 10}}\n"
        "sweep: {grid: {arrivals.rate_req_s: [1.0, 2.0]}}\ncharts: [{kind: latency_vs_rate}]\n"
    )
    assert main(["validate", str(tmp_path / "exp.yaml")]) == 2
    err = capsys.readouterr().err
    assert "charts[0] (latency_vs_rate): would fail when drawn after the runs: KeyError" in err
    np.testing.assert_equal(err.count("\n"), 1)
