"""Where runs execute: in this process, in a local process pool, or on Ray.

Every executor takes the same ``(simulate, run_specs)`` and yields ``(index,
RunResult)`` as runs finish, in whatever order they finish; the runner writes each
result to the cache as it arrives, so results never depend on the executor or on
the order. ``local`` with one job runs in this process (no pickling: any
``simulate`` callable works); with more jobs it uses a ProcessPoolExecutor, and
``simulate`` must be importable by name. ``ray`` needs the ``cluster`` extra; it
joins a running Ray instance if there is one, else starts a local one with
``jobs`` CPUs and shuts it down afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from pagesim.errors import ConfigError
from pagesim.simulator.result import RunResult
from pagesim.simulator.spec import RunSpec

Simulate = Callable[..., RunResult]
EXECUTORS = ("local", "ray")


def run_local(
    simulate: Simulate, run_specs: Sequence[RunSpec], jobs: int
) -> Iterator[tuple[int, RunResult]]:
    if jobs <= 1 or len(run_specs) <= 1:
        for index, run_spec in enumerate(run_specs):
            yield index, simulate(run_spec)
        return
    with ProcessPoolExecutor(max_workers=min(jobs, len(run_specs))) as pool:
        future_to_index = {pool.submit(simulate, spec): i for i, spec in enumerate(run_specs)}
        for future in as_completed(future_to_index):
            yield future_to_index[future], future.result()


def run_ray(
    simulate: Simulate, run_specs: Sequence[RunSpec], jobs: int
) -> Iterator[tuple[int, RunResult]]:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--executor ray needs Ray: pip install 'pagesim[cluster]' (or use --executor local)"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
    try:
        remote_simulate = ray.remote(simulate)
        ref_to_index = {remote_simulate.remote(spec): i for i, spec in enumerate(run_specs)}
        pending = list(ref_to_index)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ref_to_index[done[0]], ray.get(done[0])
    finally:
        if started_here:
            ray.shutdown()


def execute(
    executor: str, simulate: Simulate, run_specs: Sequence[RunSpec], jobs: int
) -> Iterator[tuple[int, RunResult]]:
    """Run every spec on the named executor, yielding ``(index, result)`` as they finish."""
    if executor == "local":
        return run_local(simulate, run_specs, jobs)
    if executor == "ray":
        return run_ray(simulate, run_specs, jobs)
    raise ConfigError(f"--executor {executor!r}: unknown executor; allowed: {', '.join(EXECUTORS)}")
