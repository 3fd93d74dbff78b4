"""The artifact's request generation: quantized Poisson arrivals and the artifact selection.

Stories on hand-made length files (written here in the artifact's CSV layout), plus
the real artifact lengths where ``../shared/data`` has them.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from pagesim.errors import ConfigError
from pagesim.simulator.spec import run_spec_from_dict
from pagesim.workloads import build_trace
from pagesim.workloads.arrivals import quantized_poisson
from pagesim.workloads.spec import ArrivalSpec, WorkloadSpec


def test_quantized_arrivals_sit_on_quantum_starts_within_the_duration():
    times = quantized_poisson(50.0, 0.01, 2.0, np.random.default_rng(1))
    quanta = times / 0.01
    assert np.allclose(quanta, np.round(quanta))
    assert times.min() >= 0 and times.max() < 2.0 and (np.diff(times) >= 0).all()
    # several requests in one 10 ms quantum happen (mean 0.5 per quantum)
    assert max(Counter(np.round(quanta).astype(int).tolist()).values()) >= 2


def test_quantized_arrivals_count_is_random_with_the_poisson_mean():
    counts = [len(quantized_poisson(4.0, 0.01, 900.0, np.random.default_rng(s))) for s in range(8)]
    assert len(set(counts)) > 1  # the number of requests is drawn, not fixed
    # the total over 90,000 quanta is Poisson with mean 3,600 (sd 60): 5 sd either side
    assert all(3300 < c < 3900 for c in counts)
    # 900 s / 10 ms is exactly 90,000 quanta, the last starting at 899.99 s
    times = quantized_poisson(1000.0, 0.01, 900.0, np.random.default_rng(0))
    assert times.max() == pytest.approx(899.99)


def _lengths_csv(tmp_path, pairs):
    path = tmp_path / "lengths.csv"
    path.write_text("input_len,output_len\n" + "".join(f"{p},{o}\n" for p, o in pairs))
    return str(path)


PAIRS = [(10, 20), (2000, 48), (1500, 100), (1, 2), (2000, 100), (30, 40)]
KEPT = [(10, 20), (1500, 100), (1, 2), (30, 40)]  # prompt + output < 2048 only


def test_artifact_selection_repeats_the_kept_rows_in_file_order_then_shuffles(tmp_path):
    workload = WorkloadSpec(
        name="sharegpt-paper", path=_lengths_csv(tmp_path, PAIRS), num_requests=10,
        selection="artifact",
    )  # fmt: skip
    trace = build_trace(workload, ArrivalSpec(rate_req_s=2.0), max_model_len=2048,
                        rng=np.random.default_rng(0))  # fmt: skip
    got = list(zip(trace.table["prompt_len"], trace.table["output_len"], strict=True))
    # KEPT repeated to 10 and cut: the first two kept rows three times, the others twice
    assert Counter(got) == Counter(KEPT * 2 + KEPT[:2])
    assert got != KEPT * 2 + KEPT[:2]  # shuffled
    assert trace.dropped == {"prompt_len + output_len >= 2048": 2}
    # the default selection, on the same rows, applies min_len and max_prompt_len too
    sampled = build_trace(workload.model_copy(update={"selection": "sample"}),
                          ArrivalSpec(rate_req_s=2.0), max_model_len=2048,
                          rng=np.random.default_rng(0))  # fmt: skip
    assert set(sampled.table["prompt_len"]) == {10, 30}


def test_artifact_selection_drops_rows_with_nothing_to_generate_and_counts_them(tmp_path):
    """A row with an empty output (the Alpaca sample has two) is no request: dropped, counted."""
    pairs = [(10, 20), (12, 0), (2000, 48), (30, 40)]
    workload = WorkloadSpec(
        name="sharegpt-paper", path=_lengths_csv(tmp_path, pairs), num_requests=6,
        selection="artifact",
    )  # fmt: skip
    trace = build_trace(workload, ArrivalSpec(rate_req_s=2.0), max_model_len=2048,
                        rng=np.random.default_rng(0))  # fmt: skip
    assert set(trace.table["output_len"]) == {20, 40}
    assert trace.dropped == {
        "prompt_len + output_len >= 2048": 1, "output_len < 1 or prompt_len < 1": 1,
    }  # fmt: skip


def test_artifact_generator_end_to_end_is_seeded(tmp_path):
    doc = {
        "workload": {"name": "sharegpt-paper", "path": _lengths_csv(tmp_path, PAIRS),
                     "duration_s": 20.0, "selection": "artifact"},
        "arrivals": {"process": "quantized-poisson", "rate_req_s": 3.0, "quantum_s": 0.01},
    }  # fmt: skip
    spec = run_spec_from_dict(doc)

    def trace(seed):
        return build_trace(spec.workload, spec.arrivals, max_model_len=2048,
                           rng=np.random.default_rng(seed))  # fmt: skip

    a, b, c = trace(0), trace(0), trace(1)
    assert a.table.drop(columns="segments").equals(b.table.drop(columns="segments"))
    assert len(a) != len(c) or not np.array_equal(a.table["arrival_s"], c.table["arrival_s"])
    assert set(zip(a.table["prompt_len"], a.table["output_len"], strict=True)) <= set(KEPT)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"arrivals": {"process": "poisson", "quantum_s": 0.02}},
         "arrivals.quantum_s is read by process 'quantized-poisson' only, not by 'poisson'"),
        ({"arrivals": {"process": "quantized-poisson", "rate_req_s": None}},
         "arrivals.rate_req_s is required for process 'quantized-poisson'"),
        ({"workload": {"selection": "artifact", "min_len": 1}},
         "leave workload.min_len at the default"),
        ({"workload": {"selection": "artifact", "max_prompt_len": None, "replace": False}},
         "leave workload.max_prompt_len, workload.replace at the default"),
        ({"workload": {"selection": "every"}}, "selection"),
    ],
)  # fmt: skip
def test_bad_options_are_refused_naming_the_key(doc, message):
    with pytest.raises(ConfigError, match=message):
        run_spec_from_dict(doc, "exp.yaml")


def test_a_dumped_artifact_spec_reads_back():
    doc = {
        "workload": {"name": "sharegpt-paper", "duration_s": 9.0, "selection": "artifact"},
        "arrivals": {"process": "quantized-poisson", "rate_req_s": 3.0, "quantum_s": 0.02},
    }
    spec = run_spec_from_dict(doc)
    assert run_spec_from_dict(spec.model_dump(mode="json")) == spec


@pytest.mark.parametrize(
    ("workload", "arrivals", "message"),
    [
        ({"name": "alpaca-like", "selection": "artifact"}, {},
         "selection 'artifact' needs a table workload of independent rows"),
        ({"name": "sharegpt-chat", "selection": "artifact"}, {},
         "got 'sharegpt-chat'"),
        ({"name": "sharegpt", "num_requests": 10}, {"process": "quantized-poisson"},
         "quantized-poisson' draws a random number of requests over workload.duration_s"),
        ({"name": "sharegpt", "selection": "artifact"}, {"process": "replay"},
         "selection 'artifact' draws its own arrivals"),
    ],
)  # fmt: skip
def test_combinations_the_generator_cannot_honour(workload, arrivals, message):
    with pytest.raises(ConfigError, match=message):
        build_trace(WorkloadSpec(**workload), ArrivalSpec(**arrivals), max_model_len=2048,
                    rng=np.random.default_rng(0))  # fmt: skip


def test_the_artifact_generator_on_the_real_lengths(shared_data):
    csv = shared_data("paper_artifact", "sharegpt_opt_lengths.csv")
    workload = WorkloadSpec(name="sharegpt-paper", path=str(csv), duration_s=900.0,
                            selection="artifact")  # fmt: skip
    arrivals = ArrivalSpec(process="quantized-poisson", rate_req_s=4.0)
    trace = build_trace(workload, arrivals, max_model_len=2048, rng=np.random.default_rng(0))
    assert trace.dropped == {"prompt_len + output_len >= 2048": 84_226 - 79_725}
    assert 3300 < len(trace) < 3900  # Poisson, mean 3,600
    total = trace.table["prompt_len"] + trace.table["output_len"]
    assert total.max() < 2048 and trace.table["prompt_len"].min() >= 1
    # fewer requests than kept rows: a shuffle of the first len(trace) kept rows, in file order
    frame = pd.read_csv(csv)
    kept = frame[frame["input_len"] + frame["output_len"] < 2048].head(len(trace))
    want = Counter(zip(kept["input_len"], kept["output_len"], strict=True))
    assert Counter(zip(trace.table["prompt_len"], trace.table["output_len"], strict=True)) == want
    assert trace.table["arrival_s"].max() < 900.0
