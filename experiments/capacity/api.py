"""``capacity(...)``: a capacity search from Python, as ``pagesim capacity`` runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pagesim.errors import ConfigError


def capacity(
    source: str | Path,
    out_dir: str | Path,
    *,
    slo: str,
    goodput: float | None = None,
    precision: str = "5%",
    seeds: int = 1,
    vary: list[str] | None = None,
    gpu_cost: str | None = None,
    server: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    workload: str | None = None,
    num_requests: int | None = None,
    duration_s: float | None = None,
    start_rate: float | None = None,
    executor: str = "local",
    jobs: int | None = None,
    ray_address: str | None = None,
    progress: bool | None = None,
    say=None,
):
    """The highest request rate meeting ``slo`` for each point of ``vary``
    (``pagesim capacity``, docs/your_server.md): ``source`` a ``vllm bench serve`` result
    (``.json``; ``server`` holds ``replay-vllm``'s keywords: gpu, model, profile,
    server_args, vllm_version, scheduler) or an experiment (a YAML file or a shipped name).
    Writes the report into ``out_dir``; returns the :class:`~.runner.Outcome`."""
    from dataclasses import replace

    from pagesim.experiments.capacity.report import write_report
    from pagesim.experiments.capacity.runner import run_capacity
    from pagesim.experiments.capacity.search import parse_precision
    from pagesim.experiments.capacity.setup import grid, parse_gpu_cost, parse_vary, point_gpu
    from pagesim.experiments.capacity.slo import parse_slo

    parsed = parse_slo(slo, goodput)
    step = parse_precision(precision)
    if seeds < 1:
        raise ConfigError(f"--seeds {seeds}: at least 1")
    points_values = parse_vary(list(vary or []))
    prices = parse_gpu_cost(gpu_cost)
    found = _source(source, parsed, server, overrides, workload, num_requests, duration_s)
    if start_rate is not None:
        if not start_rate > 0:
            raise ConfigError(f"--start-rate {start_rate}: must be positive")
        found = replace(found, start_rate=float(start_rate))
    points = grid(points_values, "as given")
    for point in points:
        gpu = point_gpu(found.base_doc, point)
        if prices and gpu not in prices:
            raise ConfigError(f"--gpu-cost: no price for {gpu} (point {point.label!r})")
    return run_capacity(
        found, parsed, points, step, list(range(seeds)), Path(out_dir), executor=executor,
        jobs=jobs, ray_address=ray_address, progress=progress, say=say,
        write=lambda outcome, out: write_report(outcome, out, prices),
    )  # fmt: skip


def _source(source, slo, server, overrides, workload, num_requests, duration_s):
    """The server and mix of a result (``.json``) or an experiment."""
    from pagesim.experiments.capacity.setup import from_experiment, from_result

    path = Path(source)
    if path.suffix == ".json":
        if not path.is_file():
            raise ConfigError(f"{path}: no such file")
        if not (server or {}).get("gpu"):
            raise ConfigError("--gpu: give the GPU the result's server ran on (e.g. H100)")
        found = from_result(
            path, slo=slo, server=dict(server or {}), overrides=dict(overrides or {}),
            workload=workload, num_requests=num_requests, duration_s=duration_s,
        )  # fmt: skip
    else:
        if server:
            given = ", ".join(f"--{k.replace('_', '-')}" for k, v in server.items() if v)
            if given:
                raise ConfigError(
                    f"{given}: describe a vllm bench serve result's server; an experiment's "
                    "base is its own server (change it with --set)"
                )
        if duration_s is not None:
            raise ConfigError("--duration-s: with a result's mix; set workload.duration_s instead")
        found = from_experiment(
            str(source), slo=slo, overrides=dict(overrides or {}), workload=workload,
            num_requests=num_requests,
        )  # fmt: skip
    return found
