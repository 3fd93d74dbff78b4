"""A plug-in is one file and one line: a toy allocator and a toy scheduler, each in a
file of its own (``toy_allocator.py``, ``toy_scheduler.py``), registered here at test
time with one line each, run through ``pagesim run`` (docs/plugins.md)."""

from __future__ import annotations

import pandas as pd
import pytest
from toy_allocator import ExactAllocator
from toy_scheduler import SerialScheduler

from pagesim.allocators import ALLOCATORS
from pagesim.cli import main
from pagesim.simulator.schedulers import SCHEDULERS

EXPERIMENT = """
name: toys
description: A toy allocator and a toy scheduler beside the shipped ones.
base:
  hardware: {kv_slots: 8192}
  workload: {name: alpaca-like, num_requests: 30}
  arrivals: {process: poisson, rate_req_s: 4.0}
  check_invariants: true
sweep:
  zip:
    - scheduler.kind: [toy-serial, vllm, toy-serial]
      allocator.kind: [toy-exact, toy-exact, paged]
charts: [{kind: memory_breakdown}]
"""


@pytest.fixture
def toys(monkeypatch):
    monkeypatch.setitem(ALLOCATORS, "toy-exact", ExactAllocator)  # the one line of each
    monkeypatch.setitem(SCHEDULERS, "toy-serial", SerialScheduler)


def test_toy_plugins_run_through_pagesim_run(toys, tmp_path, capsys):
    path = tmp_path / "toys.yaml"
    path.write_text(EXPERIMENT)
    assert main(["validate", str(path)]) == 0
    out = tmp_path / "out"
    assert main(["run", str(path), "--jobs", "1", "--out", str(out)]) == 0
    assert "3 runs (3 computed, 0 from cache)" in capsys.readouterr().out
    results = pd.read_csv(out / "results.csv")
    assert results["label"].tolist() == [
        "toy-serial+toy-exact",
        "vllm+toy-exact",
        "toy-serial+paged",
    ]
    assert (results["num_finished"] == 30).all()
    # one request at a time: a batch of one; the exact allocator wastes nothing
    serial = results.set_index("label")
    assert serial.loc["toy-serial+toy-exact", "avg_batch_size"] == pytest.approx(1.0)
    assert serial.loc["vllm+toy-exact", "avg_batch_size"] > 1.0
    assert serial.loc["toy-serial+toy-exact", "mem_internal_frag_frac"] == 0.0
    assert serial.loc["toy-serial+paged", "mem_internal_frag_frac"] > 0.0
    assert (out / "memory_breakdown.png").is_file()


def test_the_names_are_everywhere_a_name_is_read(toys, capsys):
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "toy-exact" in listed and "toy-serial" in listed
    # the CLI checks a name against the registry (its error lists the registered names)
    assert main(["simulate", "--scheduler", "no-such-scheduler"]) == 2
    assert "toy-serial" in capsys.readouterr().err
