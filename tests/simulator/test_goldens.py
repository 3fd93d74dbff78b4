"""The simulator against its golden outputs (``golden/``, written by ``make_goldens.py``).

Each golden replays a stored trace under a seeded configuration covering every
scheduler, allocator and sharing pattern (``golden/configs.py``); the per-request
table, the time series, the summary and the extra values must come out the same:
counts exactly, times and fractions to 1e-9 relative.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from pagesim.simulator import simulate
from pagesim.simulator.spec import run_spec_from_dict
from pagesim.workloads.trace import Trace

GOLDEN = Path(__file__).resolve().parent / "golden"
FILES = sorted(GOLDEN.glob("*.json.gz"))
RTOL = 1e-9


def load(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def golden_trace(golden: dict) -> Trace:
    table = pd.DataFrame(golden["trace"])
    table["segments"] = [tuple(tuple(s) for s in segs) for segs in table["segments"]]
    return Trace(table=table, name="golden")


def assert_column(name: str, got: list, want: list) -> None:
    assert len(got) == len(want), f"{name}: {len(got)} rows, golden has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if isinstance(w, float) or isinstance(g, float):
            g = float("nan") if g is None else g
            w = float("nan") if w is None else w
            same = (math.isnan(g) and math.isnan(w)) or math.isclose(
                g, w, rel_tol=RTOL, abs_tol=1e-12
            )
        else:
            same = g == w
        assert same, f"{name}[{i}]: got {g!r}, golden {w!r}"


def assert_frame(label: str, frame: pd.DataFrame, golden: dict) -> None:
    assert list(frame.columns)[: len(golden)] == list(golden), f"{label}: columns differ"
    for col, want in golden.items():
        got = [None if isinstance(v, float) and v != v else v for v in frame[col].tolist()]
        assert_column(f"{label}.{col}", got, want)


def test_there_are_enough_goldens():
    assert len(FILES) >= 40


@pytest.mark.parametrize("path", FILES, ids=[p.name.split(".")[0] for p in FILES])
def test_golden(path):
    golden = load(path)
    spec = run_spec_from_dict(golden["doc"])
    result = simulate(spec, trace=golden_trace(golden))
    assert_frame("requests", result.requests, golden["requests"])
    assert_frame("timeseries", result.timeseries, golden["timeseries"])
    for key, want in golden["summary"].items():
        assert_column(f"summary.{key}", [result.summary[key]], [want])
    for key, want in golden["extra"].items():
        assert_column(f"extra.{key}", [result.extra[key]], [want])
    # every prompt token served from the prefix cache is in the time series once
    hits = int(result.timeseries["prefix_hit_tokens"].sum())
    assert hits == int(result.requests["num_cached_tokens"].sum())


def test_goldens_cover_every_kind_and_event():
    """The goldens are only as good as what their configurations exercise."""
    seen: dict[str, int] = {}
    for path in FILES:
        golden = load(path)
        doc, s = golden["doc"], golden["summary"]
        reasons = [r for r in golden["requests"]["reason"] if r]
        flags = {
            "sched_" + doc.get("scheduler", {}).get("kind", "vllm"): True,
            "alloc_" + doc.get("allocator", {}).get("kind", "paged"): True,
            "first_fit": doc.get("allocator", {}).get("placement") == "first_fit",
            "recompute": s["num_preemptions"] > 0 and s["num_swapped_blocks"] == 0,
            "swap": s["num_swapped_blocks"] > 0,
            "abort": any(r.startswith("aborted") for r in reasons),
            "prompt_limit": any(r.startswith("prompt of") for r in reasons),
            "never_fits": any("never" in r or r.startswith("needs") for r in reasons),
            "unfinished": golden["extra"]["num_unfinished"] > 0,
            "beam": max(golden["trace"]["beam_width"]) > 1,
            "parallel": max(golden["trace"]["n"]) > 1,
            "prefix_hits": s["prefix_hit_rate"] > 0,
            "copies": golden["extra"]["num_copied_blocks"] > 0,
            "every_step": doc.get("metrics", {}).get("every_step", False),
            "watermark": doc.get("allocator", {}).get("watermark", 0.01) >= 0.1,
            "check_invariants": doc.get("check_invariants", False),
        }
        for key, hit in flags.items():
            seen[key] = seen.get(key, 0) + bool(hit)
    missing = [k for k, v in seen.items() if not v]
    assert not missing, f"no golden exercises {missing}"
