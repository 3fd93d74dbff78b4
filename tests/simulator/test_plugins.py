"""A plug-in is one class and one line in its registry dict: the spec's allowed names,
the CLI's choices and the scheduler/allocator pairing rule all follow from the dicts."""

from __future__ import annotations

import pytest

from pagesim.allocators import ALLOCATORS, PagedAllocator
from pagesim.errors import ConfigError
from pagesim.simulator import simulate
from pagesim.simulator.schedulers import SCHEDULERS, VllmScheduler
from pagesim.simulator.spec import run_spec_from_dict


class EagerScheduler(VllmScheduler):
    """A scheduler plug-in for the test: vLLM's rules under another name."""

    kind = "eager-test"


def _choices(parser, subcommand: str, flag: str) -> list[str]:
    sub = next(a for a in parser._subparsers._group_actions if subcommand in a.choices)
    action = next(a for a in sub.choices[subcommand]._actions if flag in a.option_strings)
    return list(action.choices)


def test_a_registered_scheduler_and_allocator_are_usable_everywhere(monkeypatch):
    from pagesim.cli import build_parser

    monkeypatch.setitem(SCHEDULERS, "eager-test", EagerScheduler)
    monkeypatch.setitem(ALLOCATORS, "paged-test", PagedAllocator)
    doc = {
        "workload": {"name": "alpaca-like", "num_requests": 20},
        "scheduler": {"kind": "eager-test"},
        "allocator": {"kind": "paged-test"},
    }
    result = simulate(run_spec_from_dict(doc))
    assert result.summary["num_finished"] == 20
    parser = build_parser()
    assert "eager-test" in _choices(parser, "simulate", "--scheduler")
    assert "paged-test" in _choices(parser, "simulate", "--allocator")
    # the pairing rule comes from the classes: a paged scheduler on a contiguous allocator
    with pytest.raises(
        ConfigError, match=r"'eager-test' needs a paged allocator \(paged, paged-test\)"
    ):
        run_spec_from_dict({**doc, "allocator": {"kind": "max"}})


def test_unknown_names_list_what_is_registered():
    with pytest.raises(ConfigError, match="unknown scheduler 'fifo'; allowed: orca, static, vllm"):
        run_spec_from_dict({"scheduler": {"kind": "fifo"}})
    with pytest.raises(
        ConfigError, match="unknown allocator 'slab'; allowed: max, oracle, paged, paged-v1, pow2"
    ):
        run_spec_from_dict({"allocator": {"kind": "slab"}})
    with pytest.raises(ConfigError, match="contiguous allocator \\(max, oracle, pow2\\)"):
        run_spec_from_dict({"scheduler": {"kind": "orca"}})
