"""Validation against real vLLM: replay DistServe's measured runs and compare latencies.

Scenario: DistServe (OSDI'24; GitHub ``LLMServe/DistServe``,
``simdistserve/benchmarks/alignment/data-ground-truth/opt-13b-sharegpt/``) published
per-request records of a real vLLM (early 2024, v0 engine) serving OPT-13B on one A100
SXM 80GB with ShareGPT requests at 1-4 req/s, one file per run named
``vllm-N-RATE`` (N requests at RATE req/s). Each run's exact requests (issue times from
the first one, prompt and output lengths) are replayed through pagesim's ``vllm``
scheduler with the settings that vLLM was started with (DistServe's
``evaluation/2-benchmark-serving/2-start-api-server.py``: block 16, ``--swap-space 16``,
``--gpu-memory-utilization 0.95``, ``--max-num-batched-tokens 16384``,
``--max-num-seqs 1024``; vLLM v0's defaults otherwise), once per cost model:

- ``analytic``: the roofline profile of the A100-80GB (estimates, no data);
- ``fitted``: the shipped external profile ``a100-80gb-vidur`` (fitted on Vidur's operator
  and CPU-overhead tables; nothing is fitted on these runs).

Per run and source (measured or a cost model): TTFT, TPOT (= (finish - first token) /
(output - 1), DistServe's and pagesim's definition) and end-to-end latency, p50, p90 and
mean. The saturation rate is where TTFT p50 crosses :data:`SATURATION_TTFT_S`, linearly
interpolated between the run rates (the runs' own rates: a source that never crosses it
within them is reported as "> the highest rate").

Nothing is tuned to these runs: every constant of both cost models was fixed before
they were read, and the goal (TPOT p50 within 10%, TTFT p50 within 25% below saturation,
saturation within 0.5 req/s) is reported as met or not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.experiments.vllm_serving_cost import FIT_RATES, page_lines

RUN_FILE = re.compile(r"^vllm-(\d+)-(\d+(?:\.\d+)?)\.(?:csv|exp)$")
MEASURED_COLUMNS = ("issue_time", "prompt_len", "output_len", "ttft_ms", "tpot_ms", "latency_ms")
COST_MODELS = {"analytic": None, "fitted": "a100-80gb-vidur"}
METRICS = ("ttft", "tpot", "e2e")
STATS = ("p50", "p90", "mean")
SATURATION_TTFT_S = 1.0
GOAL_TPOT_P50 = 0.10
GOAL_TTFT_P50 = 0.25
GOAL_SATURATION_REQ_S = 0.5

#: How DistServe started vLLM (see the module docstring); the rest is vLLM v0's defaults.
VLLM_SETTINGS = {
    "hardware": {"model": "opt-13b", "gpu": "a100-80gb", "gpu_memory_utilization": 0.95},
    "allocator": {"kind": "paged", "block_size": 16, "swap_space_gib": 16.0},
    "scheduler": {"kind": "vllm", "max_num_seqs": 1024, "max_num_batched_tokens": 16384},
    "max_model_len": 2048,
}


@dataclass(frozen=True)
class MeasuredRun:
    name: str
    rate_req_s: float
    table: pd.DataFrame

    @property
    def label(self) -> str:
        return f"{self.name} ({len(self.table)} req at {self.rate_req_s:g} req/s)"


def load_runs(data_dir: str | Path) -> list[MeasuredRun]:
    """Every ``vllm-N-RATE.csv`` of ``data_dir``, by rate then N."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise DataError(f"--data {data_dir}: not a folder (DistServe's vllm-N-RATE.csv runs)")
    runs = []
    for path in sorted(data_dir.iterdir()):
        match = RUN_FILE.match(path.name)
        if not match:
            continue
        df = pd.read_csv(path)
        missing = [c for c in MEASURED_COLUMNS if c not in df.columns]
        if missing:
            raise DataError(
                f"{path}: missing column {missing[0]!r}; required: {list(MEASURED_COLUMNS)}"
            )
        if int(match.group(1)) != len(df):
            raise DataError(
                f"{path}: the name says {match.group(1)} requests, the file has {len(df)}"
            )
        runs.append(MeasuredRun(path.stem, float(match.group(2)), df))
    if not runs:
        raise DataError(f"--data {data_dir}: no file named like vllm-N-RATE.csv")
    return sorted(runs, key=lambda r: (r.rate_req_s, len(r.table)))


def run_trace(run: MeasuredRun):
    """The run's exact requests: issue times from the first, prompt and output lengths."""
    from pagesim.workloads.assemble import assemble_trace

    t = run.table.sort_values("issue_time", kind="stable")
    issue = t["issue_time"].to_numpy(dtype=float)
    return assemble_trace(
        prompt_len=t["prompt_len"].to_numpy(dtype=np.int64),
        output_len=t["output_len"].to_numpy(dtype=np.int64),
        arrival_s=issue - issue[0],
        name=run.name,
        source_note=f"DistServe vLLM run {run.name}",
    )


def simulate_run(run: MeasuredRun, profile: str | None) -> pd.DataFrame:
    """Per-request ttft_s, tpot_s, e2e_s of the run replayed under ``profile``."""
    from pagesim.simulator import simulate
    from pagesim.simulator.spec import run_spec_from_dict

    doc = {**VLLM_SETTINGS, "hardware": {**VLLM_SETTINGS["hardware"], "profile": profile}}
    result = simulate(run_spec_from_dict(doc, "vllm validation"), trace=run_trace(run))
    req = result.requests
    lost = req[req["status"] != "finished"]
    if len(lost):
        raise DataError(
            f"{run.name}: {len(lost)} requests not finished in the replay ({lost['reason'].iloc[0]})"
        )
    return req[["ttft_s", "tpot_s", "e2e_s"]]


def measured_frame(run: MeasuredRun) -> pd.DataFrame:
    t = run.table
    return pd.DataFrame(
        {"ttft_s": t["ttft_ms"] / 1e3, "tpot_s": t["tpot_ms"] / 1e3, "e2e_s": t["latency_ms"] / 1e3}
    )


def _stats_row(run: MeasuredRun, source: str, df: pd.DataFrame) -> dict:
    row: dict = {"run": run.name, "rate_req_s": run.rate_req_s, "source": source}
    for m in METRICS:
        v = df[f"{m}_s"].dropna().to_numpy()
        row |= {f"{m}_s_p50": np.percentile(v, 50), f"{m}_s_p90": np.percentile(v, 90)}
        row[f"{m}_s_mean"] = v.mean()
    return row


def compare(data_dir: str | Path, cost_models: dict[str, str | None] = COST_MODELS) -> pd.DataFrame:
    """One row per run and source (measured, then each cost model): the latency statistics."""
    rows = []
    for run in load_runs(data_dir):
        rows.append(_stats_row(run, "measured", measured_frame(run)))
        for name, profile in cost_models.items():
            rows.append(_stats_row(run, name, simulate_run(run, profile)))
    return pd.DataFrame(rows)


def saturation_rate(rates: np.ndarray, ttft_p50_s: np.ndarray) -> float:
    """Where TTFT p50 first crosses SATURATION_TTFT_S, interpolated; inf if it never does."""
    order = np.argsort(rates, kind="stable")
    r, t = np.asarray(rates)[order], np.asarray(ttft_p50_s)[order]
    above = np.flatnonzero(t >= SATURATION_TTFT_S)
    if len(above) == 0:
        return float("inf")
    i = above[0]
    if i == 0:
        return float(r[0])
    frac = (SATURATION_TTFT_S - t[i - 1]) / (t[i] - t[i - 1])
    return float(r[i - 1] + frac * (r[i] - r[i - 1]))


def saturation_rates(table: pd.DataFrame) -> dict[str, float]:
    """Per source, the saturation rate over the per-rate mean of TTFT p50 (runs at one rate averaged)."""
    out = {}
    for source, sub in table.groupby("source", sort=False):
        per_rate = sub.groupby("rate_req_s")["ttft_s_p50"].mean()
        out[source] = saturation_rate(per_rate.index.to_numpy(), per_rate.to_numpy())
    return out


def errors(table: pd.DataFrame) -> pd.DataFrame:
    """Relative error (predicted / measured - 1) of every statistic, per run and cost model."""
    measured = table[table["source"] == "measured"].set_index("run")
    cols = [f"{m}_s_{s}" for m in METRICS for s in STATS]
    out = []
    for source, sub in table[table["source"] != "measured"].groupby("source", sort=False):
        rel = sub.set_index("run")[cols] / measured[cols] - 1.0
        rel.insert(0, "rate_req_s", measured["rate_req_s"])
        rel.insert(0, "source", source)
        out.append(rel.reset_index())
    return pd.concat(out, ignore_index=True)


# ---- the report: table, chart, page ----------------------------------------------------------

CSV_NAME = "validation_vllm.csv"
CHART_NAME = "validation_vllm.png"
PAGE_NAME = "validation.md"
COMMAND = (
    "pagesim validate-vllm --data DATA/distserve_vllm_opt13b --out OUT --docs docs/validation.md"
)


def _ms(x: float) -> str:
    return f"{x * 1e3:,.0f}" if x >= 0.1 else f"{x * 1e3:.1f}"


def _pct(x: float) -> str:
    return f"{x:+.0%}"


def _sat(x: float, top: float) -> str:
    return f"> {top:g} (not within the runs)" if not np.isfinite(x) else f"{x:.2f}"


def draw_chart(table: pd.DataFrame, path: Path) -> Path:
    """Predicted vs measured per rate: TTFT, TPOT, E2E; p50 solid, p90 dashed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 4.0))
    axes = fig.subplots(1, 3)
    styles = {"measured": ("k", "o"), "analytic": ("tab:blue", "s"), "fitted": ("tab:orange", "^")}
    for ax, m in zip(axes, METRICS, strict=True):
        for source, sub in table.groupby("source", sort=False):
            color, marker = styles.get(source, ("tab:gray", "x"))
            per_rate = sub.groupby("rate_req_s")[[f"{m}_s_p50", f"{m}_s_p90"]].mean()
            ax.plot(
                per_rate.index,
                per_rate[f"{m}_s_p50"] * 1e3,
                "-",
                color=color,
                marker=marker,
                label=f"{source} p50",
            )
            ax.plot(
                per_rate.index,
                per_rate[f"{m}_s_p90"] * 1e3,
                "--",
                color=color,
                alpha=0.6,
                label=f"{source} p90",
            )
        ax.set_yscale("log")
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(f"{m.upper()} (ms)")
        ax.set_title(f"{m.upper()}: OPT-13B, A100-80GB, vLLM (DistServe runs)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def _cost_model_lines() -> list[str]:
    from pagesim.simulator.costmodel.factory import make_cost_model
    from pagesim.simulator.spec import HardwareSpec
    from pagesim.simulator.specs import get_gpu, get_model

    lines = []
    for name, profile in COST_MODELS.items():
        hw = HardwareSpec(**{**VLLM_SETTINGS["hardware"], "profile": profile})
        cost = make_cost_model(hw, get_model(hw.model), get_gpu(hw.gpu))
        lines.append(f"- **{name}**: {cost.description}")
    return lines


def _step_lines(data_dir: Path) -> list[str]:
    """Diagnostic: the cost models' step times beside DistServe's fitted vLLM step model."""
    import json

    from pagesim.simulator.costmodel.factory import make_cost_model
    from pagesim.simulator.plan import BatchPlan
    from pagesim.simulator.spec import HardwareSpec
    from pagesim.simulator.specs import get_gpu, get_model

    shapes = [
        (
            "decode, 1 seq x 1,000 ctx",
            BatchPlan.from_lens(decode_context_lens=(1000,)),
            ("decode", 1, 1000),
        ),
        (
            "decode, 8 seqs x 1,000 ctx",
            BatchPlan.from_lens(decode_context_lens=(1000,) * 8),
            ("decode", 8, 1000),
        ),
        (
            "decode, 32 seqs x 1,000 ctx",
            BatchPlan.from_lens(decode_context_lens=(1000,) * 32),
            ("decode", 32, 1000),
        ),
        (
            "prefill, 1 prompt of 800",
            BatchPlan.from_lens(prefill_new_lens=(800,), prefill_context_lens=(800,)),
            ("prefill", 1, 800),
        ),
        (
            "prefill, 1 prompt of 2,000",
            BatchPlan.from_lens(prefill_new_lens=(2000,), prefill_context_lens=(2000,)),
            ("prefill", 1, 2000),
        ),
    ]
    costs = {}
    for name, profile in COST_MODELS.items():
        hw = HardwareSpec(**{**VLLM_SETTINGS["hardware"], "profile": profile})
        costs[name] = make_cost_model(hw, get_model(hw.model), get_gpu(hw.gpu))
    ds_path = data_dir / "profiler-a100-80g.vllm.json"
    ds = None
    if ds_path.is_file():
        ds = json.loads(ds_path.read_text()).get("facebook/opt-13b", {}).get("1")

    def distserve(kind: str, batch: int, n: int) -> str:
        if ds is None:
            return "—"
        if kind == "prefill":
            a, b, c = ds["prefill"]
            return f"{a + b * n + c * n * n:.1f}"
        key = (
            "decoding_smallbs"
            if batch <= ds["decoding_large_small_bs_threshold"]
            else "decoding_largebs"
        )
        a, b, c = ds[key]
        return f"{a + b * n * batch + c * batch:.1f}"

    lines = [
        "| step | "
        + " | ".join(f"{n} (ms)" for n in costs)
        + " | DistServe's fitted step model (ms) |",
        "|---|" + "---|" * (len(costs) + 1),
    ]
    for label, plan, key in shapes:
        cells = " | ".join(f"{c.step_time_s(plan) * 1e3:.1f}" for c in costs.values())
        lines.append(f"| {label} | {cells} | {distserve(*key)} |")
    return lines


def render_page(table: pd.DataFrame, data_dir: Path) -> str:
    sat = saturation_rates(table)
    top = float(table["rate_req_s"].max())
    err = errors(table)
    measured_sat = sat["measured"]
    lines = [
        "# Validation against real vLLM (OPT-13B, A100-80GB, DistServe's runs)",
        "",
        f"<!-- Generated by `{COMMAND}`; do not edit by hand. -->",
        "",
        "DistServe (OSDI'24) published per-request records of a real vLLM (early 2024, v0 engine)",
        "serving OPT-13B on one A100 SXM 80GB with ShareGPT requests (GitHub `LLMServe/DistServe`,",
        "`simdistserve/benchmarks/alignment/data-ground-truth/opt-13b-sharegpt/`, commit 20a1633;",
        "not copied here: the command reads them from `--data`). Each run's exact requests",
        "(issue times, prompt and output lengths) are replayed through pagesim's `vllm`",
        "scheduler with the settings that vLLM was started with: block 16, max_num_seqs 1024,",
        "max_num_batched_tokens 16384, gpu_memory_utilization 0.95, swap 16 GiB, max length",
        "2048. **Nothing is fitted on these runs** by the two cost models (fixed before); only",
        "the last sections fit one parameter on the runs at "
        f"{' and '.join(f'{r:g}' for r in FIT_RATES)} req/s and report the others as held out.",
        "",
        *_cost_model_lines(),
        "",
        "Definitions: TTFT = first token − issue; TPOT = (finish − first token) / (output − 1);",
        "E2E = finish − issue (DistServe's and pagesim's). Error = predicted / measured − 1.",
        f"Saturation rate: where TTFT p50 crosses {SATURATION_TTFT_S:g} s, interpolated linearly",
        "between the runs' rates (two runs at one rate are averaged).",
        "",
        f"![predicted vs measured]({CHART_NAME})",
        "",
        "## Goals",
        "",
        "| goal | met? | detail |",
        "|---|---|---|",
    ]
    below = err[err["rate_req_s"] < measured_sat] if np.isfinite(measured_sat) else err
    for source, sub in below.groupby("source", sort=False):
        worst_tpot = sub["tpot_s_p50"].abs().max()
        worst_ttft = sub["ttft_s_p50"].abs().max()
        gap = abs(sat[source] - measured_sat) if np.isfinite(sat[source]) else float("inf")
        lines += [
            f"| {source}: TPOT p50 within {GOAL_TPOT_P50:.0%} below saturation | "
            f"{'yes' if worst_tpot <= GOAL_TPOT_P50 else '**no**'} | worst {worst_tpot:.0%} "
            f"({', '.join(f'{r:g}: {e:+.0%}' for r, e in zip(sub['rate_req_s'], sub['tpot_s_p50'], strict=True))}) |",
            f"| {source}: TTFT p50 within {GOAL_TTFT_P50:.0%} below saturation | "
            f"{'yes' if worst_ttft <= GOAL_TTFT_P50 else '**no**'} | worst {worst_ttft:.0%} "
            f"({', '.join(f'{r:g}: {e:+.0%}' for r, e in zip(sub['rate_req_s'], sub['ttft_s_p50'], strict=True))}) |",
            f"| {source}: saturation within {GOAL_SATURATION_REQ_S:g} req/s | "
            f"{'yes' if gap <= GOAL_SATURATION_REQ_S else '**no**'} | predicted "
            f"{_sat(sat[source], top)}, measured {_sat(measured_sat, top)} req/s |",
        ]
    lines += [
        "",
        "## Per run (ms)",
        "",
        "| run | rate | source | TTFT p50 | TTFT p90 | TTFT mean | TPOT p50 | TPOT p90 | TPOT mean | E2E p50 | E2E p90 | E2E mean |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    cols = [f"{m}_s_{s}" for m in METRICS for s in STATS]
    for r in table.itertuples(index=False):
        d = r._asdict()
        lines.append(
            f"| {d['run']} | {d['rate_req_s']:g} | {d['source']} | "
            + " | ".join(_ms(d[c]) for c in cols)
            + " |"
        )
    lines += [
        "",
        "## Errors (predicted / measured − 1)",
        "",
        "| run | rate | cost model | TTFT p50 | TTFT p90 | TTFT mean | TPOT p50 | TPOT p90 | TPOT mean | E2E p50 | E2E p90 | E2E mean |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in err.itertuples(index=False):
        d = r._asdict()
        lines.append(
            f"| {d['run']} | {d['rate_req_s']:g} | {d['source']} | "
            + " | ".join(_pct(d[c]) for c in cols)
            + " |"
        )
    lines += [
        "",
        "## Saturation rate (req/s)",
        "",
        "| source | TTFT p50 crosses 1 s at |",
        "|---|---|",
        *(f"| {s} | {_sat(v, top)} |" for s, v in sat.items()),
        "",
        *page_lines(load_runs(data_dir), measured_sat),
        "",
        "## Diagnostic: one step's time",
        "",
        "The cost models' step times for a few plans, beside DistServe's own fitted step-time",
        "model of this vLLM (`profiler-a100-80g.vllm.json` in the same folder; their model,",
        "not a measurement, and not used by pagesim's prediction):",
        "",
        *_step_lines(Path(data_dir)),
        "",
    ]
    return "\n".join(lines)


def write_validation(
    data_dir: str | Path, out_dir: str | Path, docs_page: str | Path | None = None
) -> dict[str, Path]:
    """Run :func:`compare` and write the CSV, the chart and the page (and the docs page)."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    table = compare(data_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"csv": out_dir / CSV_NAME}
    table.to_csv(written["csv"], index=False, float_format="%.6g")
    written["chart"] = draw_chart(table, out_dir / CHART_NAME)
    page = render_page(table, data_dir)
    written["page"] = out_dir / PAGE_NAME
    written["page"].write_text(page)
    if docs_page is not None:
        docs_page = Path(docs_page)
        docs_page.parent.mkdir(parents=True, exist_ok=True)
        docs_page.write_text(page)
        written["docs_page"] = docs_page
        written["docs_chart"] = draw_chart(table, docs_page.parent / CHART_NAME)
    return written
