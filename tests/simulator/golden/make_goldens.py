"""Write the engine golden files: ``python tests/simulator/golden/make_goldens.py``.

``--only NAME ...`` writes only those (run it under the build the goldens should pin).
Each golden is one seeded configuration (``configs.py``) with the trace it replays
(stored, so that the goldens do not depend on how workloads are built), and what the
simulator returned for it: the per-request table, the time series, the summary and the
extra values. ``test_goldens.py`` replays every trace and compares (counts exactly,
times to 1e-9 relative).

They were first written before the simulator became one engine, when two engines
replayed every configuration (the SimPy step engine and an event-driven fast engine);
this script then checked that the two agreed on every configuration before writing the
step engine's output. Rewriting them is only right after a deliberate change of the
simulator's semantics, and the commit that does it must say which.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from configs import golden_configs  # noqa: E402

from pagesim.simulator import simulate  # noqa: E402
from pagesim.simulator.spec import run_spec_from_dict  # noqa: E402
from pagesim.workloads import build_trace  # noqa: E402


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def frame_to_dict(frame) -> dict:
    return {col: [_jsonable(v) for v in frame[col].tolist()] for col in frame.columns}


def main(only: list[str]) -> None:
    """Write every golden, or only those named (``--only NAME ...``)."""
    configs = golden_configs()
    unknown = sorted(set(only) - set(configs))
    if unknown:
        raise SystemExit(f"unknown golden names: {', '.join(unknown)}")
    for name, doc in configs.items():
        if only and name not in only:
            continue
        spec = run_spec_from_dict(doc)
        trace = build_trace(
            spec.workload,
            spec.arrivals,
            max_model_len=spec.max_model_len,
            rng=np.random.default_rng(spec.seed),
        )
        result = simulate(spec, trace=trace)
        golden = {
            "doc": doc,
            "trace": frame_to_dict(trace.table),
            "requests": frame_to_dict(result.requests),
            "timeseries": frame_to_dict(result.timeseries),
            "summary": {k: _jsonable(v) for k, v in result.summary.items() if k != "sim_wall_s"},
            # the stored trace is replayed without the workload builder's filter counts
            "extra": {
                k: _jsonable(v)
                for k, v in result.extra.items()
                if k not in ("fast_engine", "num_dropped", "dropped_share")
            },
        }
        path = HERE / f"{name}.json.gz"
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
            json.dump(golden, f, separators=(",", ":"))
        print(f"{name}: {len(trace.table)} requests, {len(result.timeseries)} rows -> {path.name}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[1:] if args[:1] == ["--only"] else [])
