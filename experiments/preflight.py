"""Checks of one run that need more than its schema, done before anything is simulated.

``pagesim validate`` and ``pagesim run`` call :func:`preflight` on every point, so
``validate`` rejects everything ``run`` would reject before simulating: a missing
trace CSV, an unprepared table, a missing or malformed profile, replay of a
workload without timestamps, a KV pool too large to allocate, too small for one block,
or one its allocator could never serve a request from (``KVAllocator.pool_problem``:
a Max allocator's pool must hold one ``max_model_len`` reservation), and a run whose
requests and time series would not fit in the machine's memory
(``simulator.footprint.memory_problem``).
"""

from __future__ import annotations

from pagesim.errors import ConfigError, PagesimError
from pagesim.simulator.spec import RunSpec


def preflight(spec: RunSpec) -> str | None:
    """Why ``spec`` cannot run, in one line, or None."""
    from pagesim.allocators.registry import ALLOCATORS
    from pagesim.experiments.inputs import run_input_files
    from pagesim.simulator.costmodel.factory import resolve_profile
    from pagesim.simulator.footprint import memory_problem
    from pagesim.simulator.memory import run_kv_pool
    from pagesim.simulator.model_gpu_specs import get_gpu
    from pagesim.workloads.registry import WORKLOADS

    source = WORKLOADS.get(spec.workload.name)
    if source is not None:
        if spec.arrivals.process == "replay" and not source.is_timestamped:
            timestamped = ", ".join(n for n, s in WORKLOADS.items() if s.is_timestamped)
            return (
                f"arrivals.process: 'replay' needs a timestamped workload; "
                f"{spec.workload.name!r} has no timestamps (timestamped: {timestamped})"
            )
        if source.kind == "csv" and spec.workload.path is None:
            return "workload.path: workload 'csv' needs the path of a timestamped CSV file"
        if source.kind == "synthetic" and spec.workload.path is not None:
            return (
                f"workload.path: read by table and csv workloads, not by the synthetic "
                f"{spec.workload.name!r}"
            )
    for role, path in run_input_files(spec).items():
        if not path.is_file():
            if role == "workload" and spec.workload.path is None and source is not None:
                if source.dataset is not None:
                    from pagesim import datapaths

                    return "workload.name: " + datapaths.get_dataset(
                        source.dataset
                    ).missing_message(datapaths.data_dir())
                return (
                    f"workload.name: the length table of {spec.workload.name!r} is not prepared; "
                    f"run: pagesim workload prepare {spec.workload.name} --source RAW_FILE"
                )
            key = {"workload": "workload.path", "model": "hardware.model"}.get(
                role, "hardware.profile"
            )
            return f"{key}: file not found: {path}"
    try:
        resolve_profile(spec.hardware.profile, get_gpu(spec.hardware.gpu))
        pool = run_kv_pool(spec)
    except PagesimError as exc:
        return str(exc)
    block = spec.allocator.block_size
    if block > pool.capacity_slots:
        return (
            f"allocator.block_size: a block of {block} slots is larger than the whole KV pool "
            f"({pool.capacity_slots} slots)"
        )
    problem = ALLOCATORS[spec.allocator.kind].pool_problem(
        spec.allocator, capacity_slots=pool.capacity_slots, max_model_len=spec.max_model_len
    )
    if problem is not None:
        return f"allocator.kind: {problem}"
    return memory_problem(spec)


def check_run(spec: RunSpec, where: str) -> None:
    """Raise a ConfigError ``where: problem`` if :func:`preflight` finds one."""
    problem = preflight(spec)
    if problem is not None:
        raise ConfigError(f"{where}: {problem}")
