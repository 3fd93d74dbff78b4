"""``pagesim replay-vllm``: your own server's ``vllm bench serve`` result, replayed and compared.

Scenario: you ran ``vllm bench serve ... --save-result --save-detailed`` against your
server. The command reads that JSON (:func:`~pagesim.records.
bench_json.read_vllm_bench_json`: each request's send time, prompt and output lengths, TTFT and
token gaps), replays exactly those requests through pagesim with the settings your server
ran with (``--server-args``, the server's command line as it is:
:mod:`.server_desc` and :mod:`.server_args` say what is applied and what is not modelled;
``--vllm-version`` names the release, whose V1 scheduler and defaults then run; ``--set``
for any other RunSpec key, each acting or refused: :mod:`.replay_settings`), and writes:

- ``validation.csv`` (:mod:`.vcsv`, the format of every validation: your run is one more
  dataset, role ``held_out``: nothing is fitted on it);
- ``replay.md``: every ``vllm bench serve`` metric (request and token throughputs, mean /
  median / p99 of TTFT, TPOT, ITL and E2EL) measured beside pagesim's, with the error,
  and the settings replayed;
- ``replay.png``: the per-request distributions (TTFT, TPOT, E2E) measured and replayed;
- ``pagesim_vllm_bench.json``: pagesim's run in ``vllm bench serve``'s result format
  (:func:`~pagesim.simulator.vllm_metrics.vllm_bench_result`), to diff or plot with the
  tools you already use.

``--scheduler-alone`` (a V1 server, ``--scheduler vllm-v1``): the run is replayed a second
time with every step lasting what your server's steps lasted at that moment, read off the
result's own token times (:mod:`pagesim.calibrate.step_times`), the profile pricing each
step beside. ``validation.csv`` gains the ``recorded-steps`` rows (the scheduler's error
alone) and the profile's ``decode_given_concurrency`` rows (the step cost's error alone),
``replay.md`` a section on both.

``--fit-serving DIR`` (with ``--scheduler-alone``): the serving path of your server is
fitted on that replay's batches (:mod:`pagesim.calibrate.serving_v1`: each request's decode
time given the batches the replay ran in its real decode window, every serving form, the
one chosen by two-fold cross-validation; the front-end delay from the TTFTs) and written
as ``DIR/profile.yaml`` (``--profile`` plus the serving section, the result's file and
sha256 named) and ``DIR/report.md``: replay another run with it. ``--fit-fraction F``
fits on the first F of the requests by send time and reports the rest as held out: their
decode times given the replayed batches, and the run replayed closed loop under the fitted
profile (``validation.csv`` rows per part, cost model ``<profile>+serving-fit``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.errors import ConfigError

DATASET = "vllm-bench-serve"
PAGE_NAME = "replay.md"
CHART_NAME = "replay.png"
JSON_NAME = "pagesim_vllm_bench.json"


def async_note(settings: dict[str, Any], replays: str, flags: str) -> list[str]:
    """A V1 page's line when ``settings`` (RunSpec paths) leave async scheduling unsaid and
    name no release: pagesim's default is then off, vLLM's (from v0.14.0) on."""
    if "scheduler.async_scheduling" in settings or settings.get("server.vllm_version"):
        return []
    return [
        "",
        f"Async scheduling: off in {replays}. vLLM from v0.14.0 schedules asynchronously "
        'unless started with `--no-async-scheduling` (its log says "Asynchronous scheduling '
        f'is enabled"): if yours did, add `--async-scheduling` to {flags} '
        "(docs/vllm_versions.md).",
    ]


def replay_doc(
    *,
    model: str,
    gpu: str,
    profile: str | None,
    scheduler: str,
    settings: dict[str, Any],
    longest_request: int | None = None,
) -> dict[str, Any]:
    """The RunSpec document of the replay (dotted settings applied last); the allocator is
    vLLM V1's KV cache manager (``paged-v1``) under ``vllm-v1``, else ``paged``. Without
    ``--max-model-len`` the replay must not refuse what the server served: a named release
    (which sizes its pool for ``max_model_len``, as vLLM refuses to start when one request
    cannot fit) takes the run's ``longest_request`` (prompt + output), else 2**20."""
    from pagesim.experiments.paths import apply_overrides

    doc: dict[str, Any] = {
        "hardware": {"model": model, "gpu": gpu, "profile": profile},
        "scheduler": {"kind": scheduler},
        "allocator": {"kind": "paged-v1" if scheduler == "vllm-v1" else "paged"},
        "metrics": {"percentiles": [50.0, 90.0, 99.0]},
    }
    blocks = settings.pop("hardware.kv_blocks", None)
    doc = apply_overrides(doc, settings)
    if blocks is not None:
        block = doc.get("allocator", {}).get("block_size", 16)
        doc["hardware"]["kv_slots"] = int(blocks) * int(block)
    if "max_model_len" not in doc:
        release = doc.get("server", {}).get("vllm_version")
        doc["max_model_len"] = longest_request if release and longest_request else 1 << 20
    return doc


def metric_table(measured: dict[str, float], predicted: dict[str, float]) -> pd.DataFrame:
    """Every ``vllm bench serve`` metric in both, with the error."""
    keys = [k for k in predicted if k in measured and isinstance(measured[k], int | float)]
    rows = []
    for key in keys:
        m, p = float(measured[key]), float(predicted[key])
        rows.append(
            {"metric": key, "measured": m, "pagesim": p, "error": p / m - 1 if m else np.nan}
        )
    return pd.DataFrame(rows)


def replay_vllm(
    result_json: str | Path,
    out_dir: str | Path,
    *,
    model: str | None = None,
    gpu: str,
    profile: str | None = None,
    scheduler: str | None = None,
    server_args: str = "",
    overrides: dict[str, Any] | None = None,
    scheduler_alone: bool = False,
    fit_serving: str | Path | None = None,
    server: str = "a vLLM V1 server",
    fit_fraction: float = 1.0,
    vllm_version: str | None = None,
) -> dict[str, Path]:
    """Replay a ``vllm bench serve`` result (module docstring); the files written."""
    import json

    from pagesim.experiments.validation.bench_v1 import (
        check_fit_data,
        fit_command,
        fit_serving_v1,
        replay_own_steps,
    )
    from pagesim.experiments.validation.replay_settings import split_replay_settings
    from pagesim.experiments.validation.server_desc import describe_server
    from pagesim.records.bench_json import read_vllm_bench_json
    from pagesim.simulator import simulate
    from pagesim.simulator.spec import run_spec_from_dict

    path = Path(result_json)
    run = read_vllm_bench_json(path, DATASET)
    raw = json.loads(path.read_text())
    spec_overrides, send = split_replay_settings(overrides or {}, run.rate_req_s)
    desc = describe_server(
        model=model, gpu=gpu, profile=profile, scheduler=scheduler, server_args=server_args,
        vllm_version=vllm_version, overrides=spec_overrides, raw=raw,
    )  # fmt: skip
    _check_modes(desc.scheduler, scheduler_alone, fit_serving, fit_fraction, send.factor)
    if fit_serving is not None:
        check_fit_data(run, fit_fraction)
    given = "".join(f" / --set {k}={v}" for k, v in (overrides or {}).items())
    longest = int((run.table["prompt_len"] + run.table["output_len"]).max())
    spec = run_spec_from_dict(desc.run_doc(longest), f"--server-args{given}")
    result = simulate(spec, trace=send.trace(run))
    _check_served(result.requests)
    cost_name, measured = profile or "analytic", run.latencies()
    ids = dict(dataset=DATASET, run=run.name, rate=run.rate_req_s, role="held_out")
    launch = "given" if send.factor == 1.0 else f"send times x{send.factor:.4g}"
    rows = vcsv_rows(result.requests, measured, ids, launch, cost_name)
    alone_lines: list[str] = []
    alone_requests = None
    fitted: dict[str, Path] = {}
    if scheduler_alone:
        extra_rows, alone_lines, alone_requests, recorded = replay_own_steps(
            spec, run, measured, cost_name
        )
        rows += extra_rows
        if fit_serving is not None:
            fitted, fit_rows = fit_serving_v1(
                run, recorded.log, spec, Path(fit_serving), profile=profile, gpu=desc.gpu,
                server=server, command=fit_command(path, desc, server_args, overrides, server,
                fit_fraction), fraction=fit_fraction,
                ids=dict(dataset=DATASET, rate=run.rate_req_s, launch="given"), cost_name=cost_name,
            )  # fmt: skip
            rows += fit_rows
            alone_lines += [
                "",
                f"Serving path fitted on this run's replayed batches: `{fitted['profile']}` "
                f"(`{fitted['report']}`).",
            ]
    written = _write_outputs(
        Path(out_dir), rows, result, spec, run, raw, path, measured, alone_requests, cost_name
    )
    lines = _page_lines(path, run, raw, result, spec, desc, written.pop("metrics"), send.note,
                        filled=written.pop("filled"), cost_name=cost_name)  # fmt: skip
    written.update(fitted)
    written["page"] = Path(out_dir) / PAGE_NAME
    written["page"].write_text("\n".join(lines + alone_lines))
    return written


def _check_served(req: pd.DataFrame) -> None:
    """Every recorded request was served by the server: a replay that leaves one unserved
    (settings that cannot hold it) compares nothing; refused before anything is written."""
    lost = req[req["status"] != "finished"]
    if len(lost):
        raise ConfigError(
            f"{len(lost)} of {len(req)} recorded requests were not served in the replay "
            f"(request {int(lost['request_id'].iloc[0])}: {lost['reason'].iloc[0]}); the server "
            "served them all: check --server-args and --set (max_model_len, the pool, the budget)"
        )


def vcsv_rows(req, measured, ids: dict, launch: str, cost_name: str) -> list[dict]:
    """The replay's validation.csv rows (the headline: the profile's)."""
    from pagesim.experiments.validation import vcsv

    return vcsv.latency_rows(
        req, measured, **ids, launch=launch, cost_model=cost_name, headline=True
    )


def _check_modes(
    scheduler: str, scheduler_alone: bool, fit_serving, fit_fraction: float, factor: float
) -> None:
    """The combinations of ``--scheduler-alone``, ``--fit-serving``, ``--fit-fraction`` and
    scaled send times that make sense, or a one-line ConfigError."""
    if not 0.0 < fit_fraction <= 1.0:
        raise ConfigError(f"--fit-fraction: must be in (0, 1], got {fit_fraction}")
    if fit_fraction != 1.0 and fit_serving is None:
        raise ConfigError(
            "--fit-fraction says which requests --fit-serving fits on: add --fit-serving DIR"
        )
    if fit_serving is not None and not scheduler_alone:
        raise ConfigError(
            "--fit-serving fits on the batches of the --scheduler-alone replay: add "
            "--scheduler-alone (and --scheduler vllm-v1)"
        )
    if scheduler_alone and scheduler != "vllm-v1":
        raise ConfigError(
            f"--scheduler-alone reads the step times as a V1 server's (every step gives every "
            f"decoding request a token): it needs --scheduler vllm-v1, not {scheduler!r}"
        )
    if scheduler_alone and factor != 1.0:
        raise ConfigError(
            "--scheduler-alone replays the run under its own step times, which belong to its "
            "recorded send times: not with arrivals.time_scale or arrivals.rate_req_s"
        )


def _write_outputs(
    out_dir: Path, rows, result, spec, run, raw, path, measured, alone_requests, cost_name
) -> dict:
    """validation.csv, the JSON and the chart; the metric table and the statistics filled
    from the arrays, for the page."""
    import json

    from pagesim.experiments.validation import vcsv
    from pagesim.simulator.vllm_metrics import vllm_bench_result

    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Any] = {"csv": vcsv.write(vcsv.frame(rows), out_dir)}
    sim_json = vllm_bench_result(result, spec.metrics, label="pagesim replay")
    written["json"] = out_dir / JSON_NAME
    written["json"].write_text(json.dumps(sim_json, indent=1))
    filled = _aggregates_from_arrays(raw, measured, sim_json)
    written["metrics"] = metric_table({**raw, **filled}, sim_json)
    written["filled"] = sorted(filled)
    written["chart"] = _chart(
        measured, result.requests, out_dir / CHART_NAME, run.name, alone_requests
    )
    return written


def _aggregates_from_arrays(
    raw: dict[str, Any], measured: pd.DataFrame, predicted: dict[str, Any]
) -> dict[str, float]:
    """The TTFT, TPOT, E2EL and ITL statistics pagesim prints that the result lacks
    (a result cut down to its per-request arrays), computed from those arrays by
    ``vllm bench serve``'s definitions (``simulator/vllm_metrics.py``)."""
    import re

    from pagesim.simulator.vllm_metrics import latency_stats

    itls = raw.get("itls")
    gaps = (
        [g for row in itls for g in row]
        if isinstance(itls, list) and all(isinstance(row, list) for row in itls)
        else []
    )
    values = {
        "ttft": measured["ttft_s"].to_numpy(dtype=float),
        "tpot": measured["tpot_s"].to_numpy(dtype=float),
        "e2el": measured["e2e_s"].to_numpy(dtype=float),
        "itl": np.asarray(gaps, dtype=float),
    }
    wanted = {
        key: m.groups()
        for key in predicted
        if key not in raw
        and (m := re.fullmatch(r"(mean|median|std|p[0-9.]+)_(ttft|tpot|e2el|itl)_ms", key))
    }
    qs = sorted({float(stat[1:]) for stat, _ in wanted.values() if stat.startswith("p")})
    computed: dict[str, float] = {}
    for name in {name for _, name in wanted.values()}:
        v = values[name]
        latency_stats(computed, name, v[np.isfinite(v)] * 1e3, qs)
    return {k: computed[k] for k in wanted if np.isfinite(computed.get(k, np.nan))}


def _page_lines(
    path, run, raw, result, spec, desc, metrics, send_note, *, filled, cost_name
) -> list[str]:
    """replay.md: the run, the server as replayed, every metric beside the measured one."""
    from pagesim.experiments.validation import vcsv

    hw = spec.hardware
    settings = desc.settings
    lines = [
        f"# Replay of {path.name}",
        "",
        f"{run.num_requests} requests at {run.rate_req_s:g} req/s "
        f"({raw.get('model_id', 'model not named')}, {raw.get('backend', 'backend not named')}), "
        f"replayed by pagesim as `{hw.model}` on `{hw.gpu}`, scheduler `{spec.scheduler.kind}`, "
        f"cost model {result.notes.get('cost_model_description', cost_name)}. Nothing of this "
        "replay's cost model is fitted on this run.",
        "",
        "Settings replayed: "
        + (", ".join(f"`{k}: {v}`" for k, v in sorted(settings.items())) or "pagesim's defaults")
        + ".",
        *desc.page_lines(),
    ]
    if "arrivals" in run.meta:
        lines += ["", f"Send times: {run.meta['arrivals']}."]
    if send_note:
        lines += ["", f"Send times: {send_note}."]
    if spec.scheduler.kind == "vllm-v1":
        lines += async_note(settings, "this replay", "`--server-args`")
    lines += [
        "",
        f"![measured and replayed]({CHART_NAME})",
        "",
        "## vllm bench serve's metrics",
        "",
        "| metric | measured | pagesim | error |",
        "|---|---|---|---|",
    ]
    for r in metrics.to_dict("records"):
        lines.append(
            f"| {r['metric']} | {r['measured']:.4g} | {r['pagesim']:.4g} | {r['error']:+.1%} |"
        )
    if filled:
        lines += [
            "",
            f"The result holds no {', '.join(filled)}: measured from its per-request arrays "
            "by `vllm bench serve`'s definitions.",
        ]
    lines += [
        "",
        f"Per-request statistics are in `{vcsv.FILE_NAME}`; pagesim's run as a "
        f"`vllm bench serve` result in `{JSON_NAME}`.",
        "",
    ]
    return lines


def _chart(
    measured: pd.DataFrame,
    replayed: pd.DataFrame,
    path: Path,
    title: str,
    alone: pd.DataFrame | None = None,
) -> Path:
    """Per-request CDFs of TTFT, TPOT and E2E: measured (black), replayed (blue) and,
    with ``--scheduler-alone``, replayed under the recorded step times (green)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig = Figure(figsize=(12, 3.6))
    for ax, metric in zip(fig.subplots(1, 3), ("ttft", "tpot", "e2e"), strict=True):
        series = [(measured, "k", "measured", "-"), (replayed, "tab:blue", "pagesim", "-")]
        if alone is not None:
            series.append((alone, "tab:green", "scheduler alone (recorded steps)", "--"))
        for frame, color, label, style in series:
            v = np.sort(frame[f"{metric}_s"].dropna().to_numpy(dtype=float) * 1e3)
            y = np.arange(1, len(v) + 1) / max(len(v), 1)
            ax.plot(v, y, style, color=color, label=label)
        ax.set_xscale("log")
        # labels at 1-2-5 steps, none on the other minor ticks (they overlap on a
        # range under a decade)
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{metric.upper()} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.grid(True, alpha=0.3)
    fig.axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
