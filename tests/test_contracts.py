"""The cross-layer contracts: Trace validation, MemoryUsage, strict specs, the CLI dispatcher."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from pagesim.allocators import ALLOCATORS
from pagesim.allocators.base import MemoryUsage
from pagesim.cli import main
from pagesim.errors import ConfigError, DataError, InvariantError
from pagesim.simulator.spec import RunSpec, run_spec_from_dict
from pagesim.workloads.trace import Trace


def _table(**overrides):
    cols = {
        "request_id": np.arange(3),
        "arrival_s": np.array([0.0, 0.5, 1.0]),
        "prompt_len": np.array([10, 20, 30]),
        "output_len": np.array([5, 6, 7]),
        "n": np.ones(3, dtype=np.int64),
        "beam_width": np.ones(3, dtype=np.int64),
        "segments": [((0, 10),), ((1, 20),), ((2, 30),)],
    }
    cols.update(overrides)
    return pd.DataFrame(cols)


def test_trace_accepts_a_valid_table_and_describes_it():
    trace = Trace(_table(), name="t")
    d = trace.describe()
    assert d["num_requests"] == 3
    assert d["prompt_len_mean"] == pytest.approx(20.0)
    assert d["rate_req_s"] == pytest.approx(2.0)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"output_len": np.array([5, 0, 7])}, "output_len must be >= 1"),
        ({"prompt_len": np.array([1.5, 2.0, 3.0])}, "must be integer"),
        ({"arrival_s": np.array([0.0, 2.0, 1.0])}, "sorted by arrival_s"),
        ({"request_id": np.array([0, 2, 1])}, "request_id"),
        ({"n": np.array([2, 1, 1]), "beam_width": np.array([2, 1, 1])}, "n > 1 and beam_width > 1"),
    ],
)
def test_trace_rejects_bad_tables(overrides, fragment):
    with pytest.raises(DataError, match=fragment):
        Trace(_table(**overrides), name="bad")


def test_memory_usage_must_add_up():
    MemoryUsage(100, 40, 10, 5, 0, 45)
    with pytest.raises(InvariantError):
        MemoryUsage(100, 40, 10, 5, 0, 44)
    with pytest.raises(InvariantError):
        MemoryUsage(100, 110, 0, 0, 0, -10)


def test_run_spec_is_strict_and_names_the_key():
    assert RunSpec().allocator.block_size == 16
    with pytest.raises(ConfigError, match=r"x\.yaml: allocator\.block_sise: unknown key"):
        run_spec_from_dict({"allocator": {"block_sise": 8}}, "x.yaml")
    with pytest.raises(ConfigError, match=r"allocator\.block_size"):
        run_spec_from_dict({"allocator": {"block_size": "16"}}, "x.yaml")  # no silent coercion
    # the paged allocators that speak v0's allocator verbs (paged-v1 speaks V1's)
    paged = ", ".join(
        sorted(k for k, c in ALLOCATORS.items() if c.is_paged and c.kv_interface == "allocator")
    )
    with pytest.raises(ConfigError, match=re.escape(f"'vllm' needs a paged allocator ({paged})")):
        run_spec_from_dict({"scheduler": {"kind": "vllm"}, "allocator": {"kind": "max"}}, "x.yaml")
    with pytest.raises(ConfigError, match="never preempts"):
        run_spec_from_dict(
            {"scheduler": {"kind": "orca"}, "allocator": {"kind": "paged"}}, "x.yaml"
        )
    with pytest.raises(ConfigError, match="rate_req_s"):
        run_spec_from_dict({"arrivals": {"rate_req_s": 0}}, "x.yaml")


def test_spec_is_frozen_and_hashable_by_value():
    a, b = RunSpec(seed=3), RunSpec(seed=3)
    assert a == b and a.model_dump_json() == b.model_dump_json()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError for frozen models
        a.seed = 4  # type: ignore[misc]


def test_cli_prints_user_errors_as_one_line(capsys, monkeypatch):
    import argparse

    def boom(args: argparse.Namespace) -> int:
        raise ConfigError("bad.yaml: allocator.kind: must be one of [...]")

    parser_main = main  # the dispatcher catches PagesimError from any handler
    monkeypatch.setattr("pagesim.cli.build_parser", lambda: _parser_with(boom))
    assert parser_main(["boom"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pagesim: error: bad.yaml: allocator.kind: must be one of [...]"]


def _parser_with(func):
    import argparse

    parser = argparse.ArgumentParser(prog="pagesim")
    sub = parser.add_subparsers()
    p = sub.add_parser("boom")
    p.set_defaults(func=func)
    return parser


def test_cli_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "pagesim" in capsys.readouterr().out
