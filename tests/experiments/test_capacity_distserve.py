"""`pagesim capacity` on DistServe's later launch (real vLLM records, ../shared/data).

The target (issue 46): with SLO TTFT p50 <= 1 s, the capacity pagesim finds lies within
the bracket the real runs show: the rates of the two runs whose measured TTFT p50 straddle
1 s (vllm-300-3: 0.23 s; vllm-400-4: 4.0 s; so 3 to 4 req/s).

Decided before the search was run, not tuned: the server is the validation's headline for
that launch (experiments/validation/distserve.yaml's later settings, vLLM v0.2.3's pool as
docs/validation.md sizes it, profile a100-80gb-vidur-vllm023-serving, whose serving path
is fitted on vllm-150-1.5); the request mix is vllm-150-1.5's requests (the fit run: the
one run a user would have), re-drawn with Poisson arrivals for 100 s at each rate (as
DistServe's client ran: N = 100 x rate); 3 seeds; precision 0.1 req/s. The server is given
as an experiment YAML's base spec (a capacity source like any other)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from pagesim.experiments.capacity.api import capacity
from pagesim.experiments.validation.distserve import pools
from pagesim.experiments.validation.manifest import load_manifest
from pagesim.records.distserve_csv import read_distserve_csv

PROFILE = "a100-80gb-vidur-vllm023-serving"


def _experiment(tmp_path, folder) -> str:
    manifest = load_manifest("distserve.yaml")
    base = manifest.settings_of("later")
    slots = pools(manifest)["later"].num_gpu_blocks * base["allocator"]["block_size"]
    base["hardware"] = {**base["hardware"], "kv_slots": slots, "profile": PROFILE}
    run = read_distserve_csv(folder / "vllm-150-1.5.csv")
    mix = tmp_path / "mix-150.csv"
    pd.DataFrame(
        {
            "arrived_at": run.table["arrival_s"],
            "num_prefill_tokens": run.table["prompt_len"],
            "num_decode_tokens": run.table["output_len"],
        }
    ).to_csv(mix, index=False)
    base["workload"] = {"name": "csv", "path": str(mix), "num_requests": None,
                        "duration_s": 100.0, "min_len": 1, "max_prompt_len": None}  # fmt: skip
    base["arrivals"] = {"process": "poisson", "rate_req_s": run.rate_req_s}
    path = tmp_path / "distserve_later.yaml"
    path.write_text(yaml.safe_dump({"name": "distserve-later", "base": base}))
    return str(path)


@pytest.fixture(scope="module")
def later(tmp_path_factory, shared_data):
    folder = shared_data("distserve_vllm_opt13b")
    tmp = tmp_path_factory.mktemp("capacity")
    measured = {}
    for rate in ("3", "4"):
        run = read_distserve_csv(next(folder.glob(f"vllm-*-{rate}.csv")))
        measured[float(rate)] = float(np.median(run.latencies()["ttft_s"]))
    outcome = capacity(
        _experiment(tmp, folder), tmp / "out", slo="ttft_p50=1s", precision="0.1", seeds=3,
        progress=False,
    )  # fmt: skip
    return measured, outcome


@pytest.mark.xfail(
    strict=True,
    reason="pagesim's capacity on the later launch is 4.22 req/s (4.31 fails), above the real "
    "runs' bracket of 3-4 req/s: the headline replay itself saturates at about 4.05 req/s where "
    "the server saturated at 3.2 (its v0.2 pool 3,989 blocks against the records' ceiling of "
    "3,525, docs/validation.md); the search is not the cause",
)
def test_capacity_lies_within_the_bracket_of_the_real_runs(later):
    measured, outcome = later
    low, high = 3.0, 4.0
    assert measured[low] <= 1.0 < measured[high]  # the bracket the real runs show
    (search,) = outcome.searches
    assert low <= search.passing <= high, search.answer()


def test_capacity_agrees_with_the_validations_own_crossing(later):
    """The search's answer is bracketed and monotone, and agrees with what the validation
    page's headline replays show (docs/validation.md, Saturation rate): TTFT p50 under 1 s
    at 3 req/s (the replay of vllm-300-3) and 3.7 s at 4.5 req/s (vllm-400-4 sent faster)."""
    _, outcome = later
    (search,) = outcome.searches
    assert search.is_bracketed and search.is_monotone
    assert search.failing - search.passing <= 0.1
    assert 3.0 <= search.passing < 4.5, search.answer()
