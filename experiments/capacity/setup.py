"""What a capacity search runs: the server, the request mix, the points, the GPU prices.

The server comes from one of two sources:

- a ``vllm bench serve`` result (``RESULT.json``, with ``--model``, ``--gpu``,
  ``--profile``, ``--server-args``, ``--vllm-version`` as ``replay-vllm`` takes them:
  :func:`~pagesim.experiments.validation.server_desc.describe_server`); its request mix is
  the run's own requests (their prompt and output lengths, written to ``mix.csv`` in the
  output folder, the ``csv`` workload's layout), re-drawn at each rate: the same requests
  in a seeded random order with Poisson arrivals at that rate (``--num-requests N`` other
  than the run's count samples N of them with replacement; ``--duration-s S`` as many as
  arrive in S seconds). Its measured point (its rate and its statistics) goes on the chart;
- an experiment YAML (or a shipped name): its ``base`` spec, ``--set`` applied; its sweep
  is not run (``--vary`` varies). Its workload is the mix; its arrival process is kept when
  it draws at a rate (poisson, gamma), else Poisson.

``--workload NAME`` replaces either mix with a named workload (``--num-requests``, default
1,000). ``--vary KEY=V1,V2`` (any RunSpec path, checked by
:func:`~pagesim.experiments.schema_paths.check_dotted_path`; several make a grid) gives the
points; ``arrivals.rate_req_s`` is what the search varies and ``seed`` what ``--seeds``
does, so neither can be varied or set. ``--gpu-cost GPU=USD_PER_HOUR`` prices each point's
GPUs: the product of the point's values at :data:`GPU_COUNT_PATHS` where the spec has them
(tensor parallelism, and replicas once fleets have them).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim.errors import ConfigError
from pagesim.experiments.capacity.slo import Slo, percentiles_needed

MIX_NAME = "mix.csv"
#: the spec paths whose product is a point's number of GPUs (those the spec has)
GPU_COUNT_PATHS = ("hardware.tensor_parallel", "cluster.replicas")
#: paths the search owns
OWNED = {
    "arrivals.rate_req_s": "the search varies the rate",
    "seed": "--seeds N gives the replicates",
}
#: processes that draw arrivals at a rate (the search sets it)
RATE_PROCESSES = ("poisson", "gamma")


@dataclass(frozen=True)
class Source:
    """The server and mix a search starts from (module docstring)."""

    label: str
    base_doc: dict[str, Any]
    start_rate: float
    #: the description's lines for the page (scheduler, flags not modelled, the mix)
    lines: tuple[str, ...] = ()
    #: the run's requests (arrived_at, num_prefill_tokens, num_decode_tokens) for mix.csv
    mix: pd.DataFrame | None = None
    #: the measured run (a RunResult-like object with ``requests`` and ``summary``) and rate
    measured: Any = None
    measured_rate: float | None = None

    def doc_for(self, mix_path: Path | None) -> dict[str, Any]:
        """The base document with the mix's path filled in."""
        doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.base_doc.items()}
        if self.mix is not None and mix_path is not None and doc["workload"].get("name") == "csv":
            doc["workload"] = {**doc["workload"], "path": str(mix_path)}
        return doc


@dataclass(frozen=True)
class _Measured:
    """A measured run in the shape :func:`.slo.statistic` reads (requests and summary)."""

    requests: pd.DataFrame
    summary: dict[str, float] = field(default_factory=dict)


def _check_owned(overrides: dict[str, Any], flag: str) -> None:
    for key in overrides:
        if key in OWNED:
            raise ConfigError(f"{flag} {key}: {OWNED[key]}; it cannot be set")
        if key == "arrivals.process" and overrides[key] not in RATE_PROCESSES:
            raise ConfigError(
                f"{flag} arrivals.process={overrides[key]}: the search sets the rate of a process "
                f"that draws at one ({', '.join(RATE_PROCESSES)})"
            )


def _mix_workload(
    num: int, num_requests: int | None, duration_s: float | None, workload: str | None
) -> dict[str, Any]:
    if workload is not None:
        return {"name": workload, "num_requests": num_requests or 1000}
    if duration_s is not None:
        if num_requests is not None:
            raise ConfigError("--num-requests and --duration-s: give one")
        return {"name": "csv", "num_requests": None, "duration_s": duration_s, "replace": True,
                "min_len": 1, "max_prompt_len": None}  # fmt: skip
    count = num_requests or num
    return {"name": "csv", "num_requests": count, "replace": count != num, "min_len": 1,
            "max_prompt_len": None}  # fmt: skip


def from_result(
    path: Path, *, slo: Slo, server: dict[str, Any], overrides: dict[str, Any],
    workload: str | None = None, num_requests: int | None = None,
    duration_s: float | None = None,
) -> Source:  # fmt: skip
    """A ``vllm bench serve`` result's server and mix (module docstring); ``server``: the
    keywords of :func:`describe_server` but ``raw`` and ``overrides``."""
    import json

    from pagesim.experiments.validation.server_desc import describe_server
    from pagesim.records.bench_json import read_vllm_bench_json

    _check_owned(overrides, "--set")
    run = read_vllm_bench_json(path, "vllm-bench-serve")
    raw = json.loads(path.read_text())
    desc = describe_server(**server, overrides=overrides, raw=raw)
    doc = desc.run_doc(int((run.table["prompt_len"] + run.table["output_len"]).max()))
    doc["workload"] = {
        **_mix_workload(run.num_requests, num_requests, duration_s, workload),
        **doc.get("workload", {}),
    }
    doc["arrivals"] = {
        "process": "poisson",
        **doc.get("arrivals", {}),
        "rate_req_s": run.rate_req_s,
    }
    doc["metrics"] = {**doc.get("metrics", {}), "percentiles": percentiles_needed(slo)}
    table = run.table
    mix = pd.DataFrame(
        {
            "arrived_at": table["arrival_s"].to_numpy(dtype=float),
            "num_prefill_tokens": table["prompt_len"].to_numpy(dtype=np.int64),
            "num_decode_tokens": table["output_len"].to_numpy(dtype=np.int64),
        }
    )
    what = (
        f"the named workload `{workload}`"
        if workload
        else f"the run's {run.num_requests} requests (their prompt and output lengths, "
        f"`{MIX_NAME}`) re-drawn at each rate"
    )
    lines = (
        *desc.page_lines(),
        "",
        f"Request mix: {what}, with Poisson arrivals at the rate, a seeded draw per seed.",
    )
    return Source(
        label=path.name,
        base_doc=doc,
        start_rate=run.rate_req_s,
        lines=lines,
        mix=None if workload else mix,
        measured=_measured(run, raw),
        measured_rate=run.rate_req_s,
    )


def _measured(run, raw: dict[str, Any]) -> _Measured:
    """The run's own requests and ITL statistics, in the shape the SLO reads."""
    latencies = run.latencies()
    requests = pd.DataFrame(
        {
            "status": "finished",
            "ttft_s": latencies["ttft_s"],
            "tpot_s": latencies["tpot_s"],
            "e2e_s": latencies["e2e_s"],
            "output_len": run.table["output_len"].to_numpy(),
        }
    )
    itls = raw.get("itls")
    gaps = np.asarray(
        [g for row in itls for g in row] if isinstance(itls, list) else [], dtype=float
    )
    summary = {}
    if len(gaps):
        for q in range(1, 100):
            summary[f"p{q:g}_itl_ms"] = float(np.percentile(gaps, q)) * 1e3
    return _Measured(requests, summary)


def from_experiment(
    source: str, *, slo: Slo, overrides: dict[str, Any], workload: str | None = None,
    num_requests: int | None = None,
) -> Source:  # fmt: skip
    """An experiment's base spec (module docstring)."""
    from pagesim.experiments.validate import load_experiment_points

    _check_owned(overrides, "--set")
    spec, _ = load_experiment_points(source, overrides=overrides)
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in spec.base.items()}
    if workload is not None:
        doc["workload"] = {"name": workload, "num_requests": num_requests or 1000}
    elif num_requests is not None:
        doc["workload"] = {**doc.get("workload", {}), "num_requests": num_requests}
    arrivals = dict(doc.get("arrivals", {}))
    process = arrivals.get("process", "poisson")
    start = float(arrivals.get("rate_req_s") or 1.0)
    if process not in RATE_PROCESSES:
        arrivals = {"process": "poisson"}
    doc["arrivals"] = {**arrivals, "rate_req_s": start}
    metrics = dict(doc.get("metrics", {}))
    metrics["percentiles"] = sorted(
        set(metrics.get("percentiles", [])) | set(percentiles_needed(slo))
    )
    doc["metrics"] = metrics
    lines = (
        "",
        f"Server and requests: the base of experiment `{spec.name}` (its sweep not run); "
        f"arrivals `{doc['arrivals']['process']}` at the rate, a seeded draw per seed.",
    )
    return Source(label=spec.name, base_doc=doc, start_rate=start, lines=lines)


def _split_values(text: str) -> list[str]:
    """``a,b,[c, d]`` -> ``["a", "b", "[c, d]"]`` (commas inside brackets kept)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_vary(items: list[str]) -> dict[str, list[Any]]:
    """``--vary KEY=V1,V2`` items as path -> values (values read as YAML; GPU names
    matched leniently), or a one-line ConfigError."""
    from pagesim import yamlio
    from pagesim.experiments.schema_paths import check_dotted_path
    from pagesim.simulator.gpu_names import resolve_gpu
    from pagesim.simulator.spec import RunSpec

    out: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        values = _split_values(text)
        if not sep or not key or not values:
            raise ConfigError(
                f"--vary {item!r}: expected KEY=V1,V2,... (e.g. scheduler.max_num_seqs=128,256)"
            )
        if key in OWNED:
            raise ConfigError(f"--vary {key}: {OWNED[key]}; it cannot be varied")
        problem = check_dotted_path(RunSpec, key)
        if problem is not None:
            raise ConfigError(f"--vary {key}: {problem}")
        if key in out:
            raise ConfigError(f"--vary {key}: given twice; give each path once")
        parsed = [yamlio.load(v, f"--vary {key}={v}") for v in values]
        if key == "hardware.gpu":
            parsed = [resolve_gpu(str(v), key=f"--vary {key}") for v in parsed]
        out[key] = parsed
    return out


@dataclass(frozen=True)
class Point:
    """One configuration: its label and the paths it sets."""

    index: int
    label: str
    values: dict[str, Any]


def grid(vary: dict[str, list[Any]], default_label: str) -> list[Point]:
    """Every combination of the varied values, the last path varying fastest."""
    if not vary:
        return [Point(0, default_label, {})]
    keys = list(vary)
    return [
        Point(i, ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(keys, combo, strict=True)),
              dict(zip(keys, combo, strict=True)))
        for i, combo in enumerate(itertools.product(*(vary[k] for k in keys)))
    ]  # fmt: skip


def parse_gpu_cost(text: str | None) -> dict[str, float]:
    """``--gpu-cost a100-80gb=1.8,H100=3.5`` as pagesim GPU -> USD per GPU-hour."""
    from pagesim.simulator.gpu_names import resolve_gpu

    prices: dict[str, float] = {}
    for item in [p.strip() for p in (text or "").split(",") if p.strip()]:
        name, sep, value = item.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = float("nan")
        if not sep or not np.isfinite(price) or price <= 0:
            raise ConfigError(f"--gpu-cost {item!r}: expected GPU=USD_PER_HOUR, e.g. h100-sxm=3.5")
        prices[resolve_gpu(name, key="--gpu-cost")] = price
    return prices


def point_gpu(doc: dict[str, Any], point: Point) -> str:
    """The GPU a point runs on (varied, else the base's, else RunSpec's default)."""
    from pagesim.simulator.spec import HardwareSpec

    return str(
        point.values.get("hardware.gpu")
        or doc.get("hardware", {}).get("gpu")
        or HardwareSpec.model_fields["gpu"].default
    )


def num_gpus(spec) -> int:
    """The GPUs a point's RunSpec serves on (:data:`GPU_COUNT_PATHS` it has)."""
    count = 1
    for path in GPU_COUNT_PATHS:
        node: Any = spec
        for key in path.split("."):
            node = getattr(node, key, None)
        if isinstance(node, int) and not isinstance(node, bool):
            count *= node
    return count
