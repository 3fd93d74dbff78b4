"""The notebook API: ``pagesim.simulate`` and ``pagesim.sweep`` return DataFrames, in memory."""

from __future__ import annotations

import pandas as pd
import pytest

import pagesim
from pagesim.errors import ConfigError

SMALL = {"workload": {"num_requests": 30}, "arrivals": {"rate_req_s": 2.0}}


def test_simulate_runs_a_dict_and_returns_frames():
    run = pagesim.simulate(SMALL, overrides={"allocator.block_size": 32})
    assert isinstance(run.requests, pd.DataFrame) and len(run.requests) == 30
    row = run.summary_frame
    assert len(row) == 1 and row["num_finished"].iloc[0] == 30
    # the same as the simulator's own function on the same spec
    from pagesim.simulator import simulate
    from pagesim.simulator.spec import run_spec_from_dict

    doc = {**SMALL, "allocator": {"block_size": 32}}
    direct = simulate(run_spec_from_dict(doc))
    assert direct.requests.equals(run.requests)


def test_sweep_is_results_csv_in_memory(tmp_path):
    table = pagesim.sweep(
        SMALL,
        zip=[{"scheduler.kind": ["vllm", "orca"], "allocator.kind": ["paged", "max"]}],
        seeds=[0, 1],
    )
    assert table["allocator.kind"].tolist() == ["paged", "max"]
    assert table["num_seeds"].tolist() == [2, 2]
    assert "throughput_req_s_ci95" in table.columns
    assert not any(tmp_path.iterdir())  # nothing written


def test_bad_input_is_the_validators_message():
    with pytest.raises(ConfigError, match="allocator.kind"):
        pagesim.sweep(SMALL, grid={"allocator.kind": ["paged", "nonsense"]})
    with pytest.raises(ConfigError, match="unknown key"):
        pagesim.simulate({"workload": {"colour": "blue"}})
    with pytest.raises(TypeError, match="expected a dict"):
        pagesim.simulate(42)


def test_python_started_above_a_clone_says_so_in_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "pagesim").symlink_to(root, target_is_directory=True)
    for module in ("pagesim.simulator", "pagesim.experiments.runner", "pagesim.workloads"):
        out = subprocess.run(
            [sys.executable, "-c", f"import {module}"], cwd=tmp_path, capture_output=True, text=True
        )
        assert out.returncode != 0
        last = out.stderr.strip().splitlines()[-1]
        assert last == (
            "ImportError: pagesim is a clone's folder here, not the package: start Python elsewhere"
        ), last


def test_help_imports_neither_the_engine_nor_pandas():
    import subprocess
    import sys

    code = (
        "import sys; from pagesim.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('pandas', 'numpy', 'simpy', 'pydantic', "
        "'pagesim.simulator.engine') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_shell_completion_is_generated_from_the_parser(capsys):
    pytest.importorskip("shtab")
    from pagesim.cli import main

    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    for word in ("validate-vllm", "replay-vllm", "fit-serving", "--intervals"):
        assert word in script
