"""Helpers shared by the issue-#15 tests (test_trust_inputs.py, test_trust_outputs.py)."""

from __future__ import annotations

from pathlib import Path

from pagesim.cli import main
from pagesim.experiments.runner import run_experiment
from pagesim.experiments.validate import load_experiment

CSV_HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


def csv_trace(path: Path, rows: list[tuple[float, int, int]]) -> Path:
    path.write_text(CSV_HEADER + "".join(f"{t},{p},{o}\n" for t, p, o in rows))
    return path


def replay_doc(csv_path: Path, **base: dict) -> dict:
    doc = {
        "name": "replay",
        "base": {
            "hardware": {"kv_slots": 4000},
            "workload": {"name": "csv", "path": str(csv_path), "num_requests": None},
            "arrivals": {"process": "replay"},
            **base,
        },
        "charts": [{"kind": "latency_vs_rate", "x": "label"}],
    }
    return doc


def synthetic_doc(**workload) -> dict:
    return {
        "name": "synth",
        "base": {
            "hardware": {"kv_slots": 4000},
            "workload": {"name": "synthetic", "num_requests": 20, **workload},
            "arrivals": {"process": "poisson", "rate_req_s": 5.0},
        },
        "sweep": {"grid": {"allocator.block_size": [8, 16]}},
    }


def run_file(path: Path, out: Path, **kwargs):
    return run_experiment(
        load_experiment(path), out, jobs=1, progress=False, source=str(path), **kwargs
    )


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
