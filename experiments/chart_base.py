"""What every chart function gets, and the helpers they share.

A chart function takes ``(ctx, chart)`` — the results and where the run's files
are, and the chart's options — and returns a matplotlib Figure. It raises
:class:`ChartUnavailable` with the reason when the results cannot give it (a column
missing); the runner records the reason in summary.md and on the console rather
than dropping the chart silently. Figures are built with ``matplotlib.figure``
directly (no pyplot state), rendered by Agg.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from pagesim.experiments.spec import ChartSpec, ExperimentSpec

#: Axis labels with units for the columns charts commonly use.
COLUMN_TO_AXIS_LABEL = {
    "arrivals.rate_req_s": "request rate (req/s)",
    "arrivals.time_scale": "arrival speed-up (time_scale)",
    "ttft_s_p50": "median time to first token (s)",
    "tpot_s_p50": "median time per output token (s)",
    "tpot_s_p99": "p99 time per output token (s)",
    "allocator.block_size": "block size (tokens)",
    "allocator.watermark": "watermark (fraction of blocks)",
    "workload.n": "parallel samples n",
    "workload.beam_width": "beam width",
    "workload.shared_prefix_len": "shared prefix length (tokens)",
    "normalized_latency_s_per_tok": "normalized latency (s/token)",
    "throughput_req_s": "throughput (req/s)",
    "throughput_tok_s": "throughput (tokens/s)",
    "avg_batch_size": "average batch size (requests)",
    "num_preemptions": "preemptions (count)",
    "num_swapped_blocks": "swapped blocks (count)",
    "mem_token_frac": "token states (fraction of KV capacity)",
    "e2e_s_p50": "median end-to-end latency (s)",
    "e2e_s_p99": "p99 end-to-end latency (s)",
    "ttft_s_p99": "p99 time to first token (s)",
    "mem_sharing_saved_frac": "KV memory saved by sharing (fraction)",
    "request_goodput": "goodput (req/s meeting every SLO)",
}


#: the derived column naming a line chart's configuration (:meth:`ChartContext.with_configuration`)
CONFIGURATION = "configuration"


class ChartUnavailable(Exception):
    """The results cannot give this chart; the message says why."""


@dataclass(frozen=True)
class ChartContext:
    spec: ExperimentSpec
    results: pd.DataFrame
    out_dir: Path

    def column(self, name: str | None, default: str | None, role: str) -> str:
        """A results column for ``role`` (x, y, ...): the chart's choice, else the default."""
        chosen = name or default
        if chosen is None:
            raise ChartUnavailable(f"no {role} column given and this kind has no default")
        if chosen not in self.results.columns:
            raise ChartUnavailable(
                f"{role} {chosen!r} is not a column of results.csv "
                f"(columns: {', '.join(self.results.columns)})"
            )
        return chosen

    def point_names(self, x: str = "label") -> list[str]:
        """One name per point: the ``x`` value, plus the grid values when ``x`` repeats."""
        names = [str(v) for v in self.results[x]]
        if len(set(names)) == len(names):
            return names
        for path in self.spec.sweep.grid:
            if path != x and path in self.results.columns:
                short = path.split(".")[-1]
                names = [
                    f"{n}\n{short}={v}" for n, v in zip(names, self.results[path], strict=True)
                ]
        return names

    def configuration_column(self, x: str, facet: str | None) -> str | None:
        """The column that tells a line chart's configurations apart (one line each):
        ``label`` where each label holds several values of ``x``; else, when the label
        names each point (a sweep of ``x`` alone, or ``label_by`` naming ``x``), a column
        made of the swept paths that are neither ``x``, the facet, nor zipped with either
        (None: one configuration, one line)."""
        results = self.results
        if "label" in results.columns and results["label"].duplicated().any():
            return "label"
        tied = {x, facet}
        for group in self.spec.sweep.zip:
            if x in group or facet in group:
                tied |= set(group)
        paths = [p for p in self.spec.sweep.swept_paths if p not in tied and p in results.columns]
        if not paths:
            return None
        if len(paths) == 1:
            return paths[0]
        return CONFIGURATION

    def with_configuration(self, x: str, facet: str | None) -> tuple[pd.DataFrame, str | None]:
        """The results with :meth:`configuration_column` filled in, and its name."""
        column = self.configuration_column(x, facet)
        if column != CONFIGURATION:
            return self.results, column
        tied = {x, facet}
        for group in self.spec.sweep.zip:
            if x in group or facet in group:
                tied |= set(group)
        paths = [
            p for p in self.spec.sweep.swept_paths if p not in tied and p in self.results.columns
        ]
        names = [
            ", ".join(f"{p.split('.')[-1]}={row[p]}" for p in paths)
            for row in self.results[paths].to_dict("records")
        ]
        return self.results.assign(**{CONFIGURATION: names}), CONFIGURATION

    def timeseries(self, point_id: str) -> pd.DataFrame:
        """The time series of a point's first seed."""
        seed = self.spec.seeds[0]
        return pd.read_csv(self.out_dir / "timeseries" / f"{point_id}_seed{seed}.csv.gz")


def axis_label(column: str) -> str:
    return COLUMN_TO_AXIS_LABEL.get(column, column)


def new_figure(num_panels: int = 1, width_in: float = 6.4, height_in: float = 4.2) -> Figure:
    fig = Figure(figsize=(width_in * num_panels, height_in), layout="constrained")
    fig.subplots(1, num_panels, squeeze=False)
    return fig


def title_of(ctx: ChartContext, chart: ChartSpec, default: str) -> str:
    return chart.title or f"{ctx.spec.name}: {default}"


def quantity(column: str) -> str:
    """What a column measures, without its unit (for a title)."""
    return axis_label(column).split(" (")[0]


def set_title(fig: Figure, text: str) -> None:
    """The figure's title, wrapped to its width so that no part is cut off."""
    import textwrap

    width_in = fig.get_size_inches()[0]
    fig.suptitle(textwrap.fill(text, width=max(30, int(width_in * 11))))


def groups(frame: pd.DataFrame, column: str | None) -> list[tuple[object, pd.DataFrame]]:
    """``frame`` split by ``column`` in order of first appearance (one group if None)."""
    if column is None:
        return [(None, frame)]
    return [(key, frame[frame[column] == key]) for key in frame[column].drop_duplicates()]
