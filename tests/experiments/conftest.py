"""Shared fixtures: a tiny experiment document and a writer for experiment files."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

TINY_DOC = {
    "name": "tiny",
    "description": "Four allocators at two rates, two seeds.",
    "paper_figure": "fig2",
    "base": {
        "hardware": {"kv_slots": 15728},
        "workload": {"name": "sharegpt", "num_requests": 20},
        "arrivals": {"process": "poisson", "rate_req_s": 2.0},
    },
    "sweep": {
        "zip": [
            {
                "scheduler.kind": ["orca", "orca", "orca", "vllm"],
                "allocator.kind": ["max", "pow2", "oracle", "paged"],
            }
        ],
        "grid": {"arrivals.rate_req_s": [1.0, 2.0]},
    },
    "seeds": [0, 1],
    "quick": {"set": {"workload.num_requests": 5}, "seeds": [0]},
    "charts": [
        {"kind": "memory_breakdown"},
        {"kind": "latency_vs_rate"},
        {"kind": "memory_over_time"},
        {"kind": "heatmap", "x": "arrivals.rate_req_s", "y": "label"},
    ],
}


@pytest.fixture
def tiny_doc() -> dict:
    return copy.deepcopy(TINY_DOC)


@pytest.fixture
def write_doc(tmp_path: Path):
    def write(doc: dict, name: str = "exp.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    return write
