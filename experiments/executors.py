"""Where runs execute: in this process, in a local process pool, or on Ray.

Every executor takes the same ``(simulate, run_specs)`` and yields ``(index,
RunResult)`` as runs finish, in whatever order they finish; the runner writes each
result to the cache as it arrives, so results never depend on the executor or on
the order. A run that raises a :class:`PagesimError` ends the sweep with
:class:`RunFailed`, which carries the run's index. ``local`` with one job runs in this process (no pickling: any
``simulate`` callable works); with more jobs it uses a ProcessPoolExecutor, and
``simulate`` must be importable by name. ``ray`` needs the ``cluster`` extra
(:func:`ray_session`): it uses the Ray this process already joined, else connects to
the cluster at ``ray_address`` (``--ray-address``, else ``$RAY_ADDRESS``), else starts
a local Ray instance with ``jobs`` CPUs, and leaves it afterwards. Its workers never
read an input file by path: each run's files travel by content with the run
(``remote_inputs.py``), so a node that lacks them, or has other files at the same
paths, computes the same result.

Stopping (local pool): workers ignore SIGINT, so Ctrl-C reaches only the main
process; when the consumer stops (KeyboardInterrupt, an error, or closing the
generator) the queued runs are cancelled and the workers are terminated (then
killed after ``STOP_GRACE_S``), with further Ctrl-C ignored until that is done, so a
sweep stops within a couple of seconds and leaves no process behind. A worker also
exits on its own when the process that started it dies (even by SIGKILL): a daemon
thread watches its parent id.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any

from pagesim.errors import ConfigError, PagesimError
from pagesim.simulator.result import RunResult
from pagesim.simulator.spec import RunSpec

Simulate = Callable[..., RunResult]
#: Told one line about where runs execute (the CLI prints it).
Say = Callable[[str], None]
EXECUTORS = ("local", "ray")
#: The environment variable Ray reads a cluster's address from (as ``--ray-address``).
RAY_ADDRESS_ENV = "RAY_ADDRESS"
#: Seconds a terminated worker gets to exit before it is killed.
STOP_GRACE_S = 1.0
#: Seconds the pool's manager thread gets to end once its workers are gone.
MANAGER_EXIT_S = 10.0
#: How often a worker checks that the process that started it is alive.
PARENT_POLL_S = 0.5


class RunFailed(PagesimError):
    """Run ``index`` raised a PagesimError (the runner names its point and seed)."""

    def __init__(self, index: int, error: PagesimError) -> None:
        super().__init__(str(error))
        self.index, self.error = index, error


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent_pid:
            os._exit(1)


def _init_worker(parent_pid: int) -> None:
    """In each pool worker: leave Ctrl-C to the main process; die with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel queued runs and end every worker now (terminate, then kill), Ctrl-C masked."""
    is_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if is_main else None
    try:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)  # shutdown forgets it
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(STOP_GRACE_S)
        # the pool's manager thread closes its wake-up pipe as it ends; the interpreter's
        # exit hook writes to that pipe if the thread is still listed, and a close racing
        # that write printed "OSError: Bad file descriptor" at exit: let it end first
        if manager is not None:
            manager.join(MANAGER_EXIT_S)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def run_local(
    simulate: Simulate, run_specs: Sequence[RunSpec], jobs: int
) -> Iterator[tuple[int, RunResult]]:
    if jobs <= 1 or len(run_specs) <= 1:
        for index, run_spec in enumerate(run_specs):
            try:
                result = simulate(run_spec)
            except PagesimError as exc:
                raise RunFailed(index, exc) from None
            yield index, result
        return
    pool = ProcessPoolExecutor(
        max_workers=min(jobs, len(run_specs)),
        initializer=_init_worker,
        initargs=(os.getpid(),),
    )
    finished = False
    try:
        future_to_index = {pool.submit(simulate, spec): i for i, spec in enumerate(run_specs)}
        for future in as_completed(future_to_index):
            index = future_to_index[future]
            try:
                result = future.result()
            except PagesimError as exc:
                raise RunFailed(index, exc) from None
            yield index, result
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            stop_pool(pool)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--executor ray needs Ray: pip install 'pagesim[cluster]' (or use --executor local)"
        ) from None
    return ray


def ray_address(given: str | None) -> tuple[str | None, str]:
    """``(address, where it came from)``: ``given`` (``--ray-address``), else
    ``$RAY_ADDRESS``; None (start a local instance) when neither is set or it is ``local``."""
    if given is not None and given.strip():
        address, origin = given.strip(), "--ray-address"
    else:
        address, origin = os.environ.get(RAY_ADDRESS_ENV, "").strip(), RAY_ADDRESS_ENV
    if not address or address == "local":
        return None, ""
    return address, origin


def _count(number: float, noun: str) -> str:
    return f"{number:g} {noun}" + ("" if number == 1 else "s")


@contextmanager
def ray_session(address: str | None, jobs: int, say: Say | None = None) -> Iterator[None]:
    """Ray joined for the runs inside: the instance this process already joined (left as
    it is), else the cluster at :func:`ray_address` (``ray.init(address=...)``: its own
    CPUs, ``jobs`` does not apply), else a local instance started with ``jobs`` CPUs
    (``address="local"``, so that neither ``$RAY_ADDRESS`` nor a cluster started on this
    machine with ``ray start`` is joined by mistake). ``say`` is told which, in one line.
    A session this function opened is closed on the way out (a cluster keeps running)."""
    ray = _import_ray()
    if ray.is_initialized():
        yield
        return
    address, origin = ray_address(address)
    if address is None:
        ray.init(address="local", num_cpus=jobs, include_dashboard=False, log_to_driver=False)
        line = (
            f"ray: started a local Ray instance with {_count(jobs, 'CPU')} "
            f"(no --ray-address or {RAY_ADDRESS_ENV} given)"
        )
    else:
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
            raise ConfigError(f"{origin} {address}: cannot join the Ray cluster: {exc}") from None
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        cpus = ray.cluster_resources().get("CPU", 0)
        line = (
            f"ray: joined the cluster at {address} ({origin}): {_count(len(nodes), 'node')}, "
            f"{_count(cpus, 'CPU')}; input files go to the workers by content"
        )
    try:
        if say is not None:
            say(line)
        yield
    finally:
        ray.shutdown()


def _task_error(exc: PagesimError) -> PagesimError:
    """The error a run raised, out of Ray's wrapper (an instance of a subclass of its class,
    whose text carries the worker's traceback)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, PagesimError) else exc


def run_ray(
    simulate: Simulate,
    run_specs: Sequence[RunSpec],
    jobs: int,
    address: str | None = None,
    say: Say | None = None,
) -> Iterator[tuple[int, RunResult]]:
    from pagesim.experiments.remote_inputs import InputPacker, simulate_shipped

    if not run_specs:
        return  # every run is cached: no Ray to join
    ray = _import_ray()
    with ray_session(address, jobs, say):
        packer = InputPacker(ray.put)
        simulate_ref = ray.put(simulate)
        remote_run = ray.remote(simulate_shipped)
        ref_to_index = {
            remote_run.remote(simulate_ref, spec, packer.pack(spec)): i
            for i, spec in enumerate(run_specs)
        }
        pending = list(ref_to_index)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                index = ref_to_index[done[0]]
                try:
                    result = ray.get(done[0])
                except PagesimError as exc:
                    raise RunFailed(index, _task_error(exc)) from None
                yield index, result
        finally:
            for ref in pending:  # stopped early: the queued runs are not wanted
                ray.cancel(ref)


def execute(
    executor: str,
    simulate: Simulate,
    run_specs: Sequence[RunSpec],
    jobs: int,
    *,
    ray_address: str | None = None,
    say: Say | None = None,
) -> Iterator[tuple[int, RunResult]]:
    """Run every spec on the named executor, yielding ``(index, result)`` as they finish.

    ``ray_address`` and ``say``: see :func:`ray_session`. Close the returned generator (or
    let an exception pass through it) to stop early.
    """
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: must be at least 1")
    if executor == "local":
        return run_local(simulate, run_specs, jobs)
    if executor == "ray":
        return run_ray(simulate, run_specs, jobs, ray_address, say)
    raise ConfigError(f"--executor {executor!r}: unknown executor; allowed: {', '.join(EXECUTORS)}")
