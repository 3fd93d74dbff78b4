"""The runner's bookkeeping on a 1,000-run sweep of tiny runs.

Scenario: an experiment of 50 request rates x 20 seeds = 1,000 runs, each a
synthetic workload of ``--num-requests`` requests (default 5), run in this process
(``--jobs 1``, so the simulate time is measured exactly) into a fresh temporary
folder. Reported: wall time of the whole ``run_experiment``, time
inside ``simulate``, time storing runs in the cache, the rest of the completion
path (bookkeeping), the calls to ``run_key``, and a second ``run_experiment``
that finds every run in the cache.

``--compare-old`` also times the completion path the runner had before issue #15
(on each completion it recomputed the key of every missing run:
``sum(run_key(s) == run_key(done) for s in missing)``) for the first 20
completions and extrapolates it to the sweep (it is the same work at every
completion, so the extrapolation is linear in the number of completions).

Run: ``python benchmarks/bench_runner.py [--num-runs 1000] [--num-requests 5] [--compare-old]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from pagesim.experiments import cache as cache_module
from pagesim.experiments import runner
from pagesim.experiments.spec import ExperimentSpec
from pagesim.experiments.validate import validate_points
from pagesim.simulator import simulate

NUM_SEEDS = 20


def sweep(num_runs: int, num_requests: int) -> ExperimentSpec:
    num_rates = max(1, num_runs // NUM_SEEDS)
    return ExperimentSpec.model_validate(
        {
            "name": "bench_runner",
            "base": {
                "hardware": {"kv_slots": 4000},
                "workload": {"name": "synthetic", "num_requests": num_requests},
                "arrivals": {"process": "poisson", "rate_req_s": 1.0},
            },
            "sweep": {"grid": {"arrivals.rate_req_s": [1.0 + i for i in range(num_rates)]}},
            "seeds": list(range(NUM_SEEDS)),
        }
    )


class Timed:
    """Wraps a function, adding its wall time and call count."""

    def __init__(self, fn) -> None:
        self.fn, self.seconds, self.calls = fn, 0.0, 0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


def old_completion_s(spec: ExperimentSpec, num_completions: int = 20) -> tuple[float, int]:
    """Seconds the pre-#15 completion path spent on ``num_completions`` completions."""
    specs = [
        run_spec.model_copy(update={"seed": seed})
        for _, run_spec in validate_points(spec, "bench")
        for seed in spec.seeds
    ]
    start = time.perf_counter()
    for done in specs[:num_completions]:
        sum(cache_module.run_key(s) == cache_module.run_key(done) for s in specs)
    return time.perf_counter() - start, len(specs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-runs", type=int, default=1000)
    parser.add_argument("--num-requests", type=int, default=5)
    parser.add_argument("--compare-old", action="store_true")
    args = parser.parse_args()
    spec = sweep(args.num_runs, args.num_requests)
    timed_simulate = Timed(simulate)
    timed_key = Timed(cache_module.run_key)
    timed_store = Timed(cache_module.RunCache.store)
    runner.run_key = timed_key
    cache_module.RunCache.store = lambda self, *a: timed_store(self, *a)
    timed_run_all = Timed(runner._run_all)
    runner._run_all = timed_run_all
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        out = runner.run_experiment(spec, Path(tmp) / "out", simulate=timed_simulate, jobs=1,
                                    progress=False)  # fmt: skip
        total_s = time.perf_counter() - start
        bookkeeping_s = timed_run_all.seconds - timed_simulate.seconds - timed_store.seconds
        print(f"runs: {out.num_runs} ({out.num_computed} computed), "
              f"{args.num_requests} requests each")  # fmt: skip
        print(f"run_experiment: {total_s:.2f} s wall")
        print(
            f"  simulate:           {timed_simulate.seconds:.2f} s ({timed_simulate.calls} calls)"
        )
        print(f"  cache store:        {timed_store.seconds:.2f} s")
        print(f"  completion path:    {bookkeeping_s:.3f} s (run_all less simulate and store)")
        print(f"  outside the runs:   {total_s - timed_run_all.seconds:.2f} s "
              "(validation, keys, results.csv, per-run tables, summary)")  # fmt: skip
        print(f"  run_key calls:      {timed_key.calls} ({timed_key.seconds:.3f} s)")
        start = time.perf_counter()
        again = runner.run_experiment(spec, Path(tmp) / "out", simulate=timed_simulate, jobs=1,
                                      progress=False)  # fmt: skip
        print(f"rerun, all {again.num_runs} from cache: {time.perf_counter() - start:.2f} s wall")
    if args.compare_old:
        seconds, num = old_completion_s(spec)
        print(f"pre-#15 completion path: {seconds:.2f} s for 20 completions -> "
              f"~{seconds / 20 * num:.0f} s for {num} (extrapolated)")  # fmt: skip


if __name__ == "__main__":
    main()
