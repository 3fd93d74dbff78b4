"""`pagesim run / validate / list` through the real dispatcher."""

from __future__ import annotations

import pandas as pd

from pagesim.cli import main


def test_validate_ok_and_bad(tiny_doc, write_doc, capsys):
    assert main(["validate", str(write_doc(tiny_doc))]) == 0
    assert "ok (8 points × 2 seeds, 4 charts)" in capsys.readouterr().out
    tiny_doc["base"]["allocator"] = {"kind": "buddy"}
    assert main(["validate", str(write_doc(tiny_doc))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pagesim: error: ") and "base.allocator.kind" in err


def test_list_shows_experiments_and_chart_kinds(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "memory_waste" in out and "chart kinds: memory_breakdown" in out


def test_run_with_set_and_quick(tiny_doc, write_doc, tmp_path, capsys):
    tiny_doc["sweep"] = {
        "zip": [{"scheduler.kind": ["orca", "vllm"], "allocator.kind": ["oracle", "paged"]}]
    }
    tiny_doc["charts"] = [{"kind": "memory_breakdown"}]
    path = write_doc(tiny_doc)
    argv = ["run", str(path), "--quick", "--jobs", "1", "--out", str(tmp_path / "out"),
            "--set", "workload.num_requests=12", "--set", "allocator.block_size=32"]  # fmt: skip
    assert main(argv) == 0
    assert "2 runs (2 computed, 0 from cache)" in capsys.readouterr().out
    spec = pd.read_json(tmp_path / "out" / "experiment.json", typ="series")
    assert spec["base"]["workload"]["num_requests"] == 12
    assert spec["base"]["allocator"]["block_size"] == 32
    assert (tmp_path / "out" / "memory_breakdown.png").is_file()


def test_bad_set_is_one_line_error(tiny_doc, write_doc, capsys):
    assert main(["run", str(write_doc(tiny_doc)), "--set", "novalue"]) == 2
    assert "expected key=value" in capsys.readouterr().err
