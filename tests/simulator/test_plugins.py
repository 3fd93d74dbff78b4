"""A plug-in is one class and one line in its registry dict: the spec's allowed names,
the CLI's choices and the scheduler/allocator pairing rule all follow from the dicts."""

from __future__ import annotations

import re

import pytest

from pagesim.allocators import ALLOCATORS, PagedAllocator
from pagesim.errors import ConfigError
from pagesim.simulator import simulate
from pagesim.simulator.schedulers import SCHEDULERS, VllmScheduler
from pagesim.simulator.spec import run_spec_from_dict


class EagerScheduler(VllmScheduler):
    """A scheduler plug-in for the test: vLLM's rules under another name."""

    kind = "eager-test"


def test_a_registered_scheduler_and_allocator_are_usable_everywhere(monkeypatch, capsys):
    from pagesim.cli import main

    monkeypatch.setitem(SCHEDULERS, "eager-test", EagerScheduler)
    monkeypatch.setitem(ALLOCATORS, "paged-test", PagedAllocator)
    doc = {
        "workload": {"name": "alpaca-like", "num_requests": 20},
        "scheduler": {"kind": "eager-test"},
        "allocator": {"kind": "paged-test"},
    }
    result = simulate(run_spec_from_dict(doc))
    assert result.summary["num_finished"] == 20
    # the CLI accepts the registered names and lists them when refusing another
    assert main(["simulate", "--scheduler", "nope", "--num-requests", "5"]) == 2
    assert "'eager-test'" in capsys.readouterr().err
    assert main(["simulate", "--allocator", "nope", "--num-requests", "5"]) == 2
    assert "'paged-test'" in capsys.readouterr().err
    # the pairing rule comes from the classes: a paged scheduler on a contiguous allocator
    assert "paged-test" in _kinds(is_paged=True)
    with pytest.raises(
        ConfigError, match=re.escape(f"'eager-test' needs a paged allocator ({_kinds(True)})")
    ):
        run_spec_from_dict({**doc, "allocator": {"kind": "max"}})


def _kinds(is_paged: bool) -> str:
    """The registered allocators of one kind speaking v0's allocator verbs, as the rule lists them."""
    return ", ".join(
        sorted(
            k
            for k, cls in ALLOCATORS.items()
            if cls.is_paged == is_paged and cls.kv_interface == "allocator"
        )
    )


def test_unknown_names_list_what_is_registered():
    schedulers, allocators = ", ".join(sorted(SCHEDULERS)), ", ".join(sorted(ALLOCATORS))
    with pytest.raises(
        ConfigError, match=re.escape(f"unknown scheduler 'fifo'; allowed: {schedulers}")
    ):
        run_spec_from_dict({"scheduler": {"kind": "fifo"}})
    with pytest.raises(
        ConfigError, match=re.escape(f"unknown allocator 'slab'; allowed: {allocators}")
    ):
        run_spec_from_dict({"allocator": {"kind": "slab"}})
    with pytest.raises(
        ConfigError, match=re.escape(f"contiguous allocator ({_kinds(is_paged=False)})")
    ):
        run_spec_from_dict({"scheduler": {"kind": "orca"}})
