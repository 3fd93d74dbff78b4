import numpy as np
import pandas as pd
import pytest

from pagesim.errors import ConfigError, DataError
from pagesim.workloads import WORKLOADS, build_trace
from pagesim.workloads.spec import ArrivalSpec, LengthDist, WorkloadSpec

POISSON = ArrivalSpec(process="poisson", rate_req_s=4.0)
BUILDABLE = [n for n, s in WORKLOADS.items() if s.is_prepared and s.kind != "csv"]


def _build(seed: int = 0, arrivals: ArrivalSpec = POISSON, max_model_len: int = 2048, **spec):
    return build_trace(
        WorkloadSpec(**spec), arrivals, max_model_len=max_model_len, rng=np.random.default_rng(seed)
    )


def _segments_sum(trace) -> np.ndarray:
    return np.array([sum(n for _, n in segs) for segs in trace.table["segments"]])


@pytest.mark.parametrize("name", BUILDABLE)
def test_same_seed_same_trace_and_well_formed(name):
    a = _build(3, name=name, num_requests=300)
    b = _build(3, name=name, num_requests=300)
    c = _build(4, name=name, num_requests=300)
    pd.testing.assert_frame_equal(a.table, b.table)
    assert not a.table["arrival_s"].equals(c.table["arrival_s"])
    assert len(a) == 300 and a.name == name
    assert np.array_equal(_segments_sum(a), a.table["prompt_len"].to_numpy())
    t = a.table
    assert (t["prompt_len"] <= 1024).all() and (t["prompt_len"] >= 4).all()
    assert (t["output_len"] >= 4).all() and (t["prompt_len"] + t["output_len"] <= 2048).all()


def test_csv_workload_without_replacement_takes_every_row(data_dir):
    path = str(data_dir / "trace_processed.csv")
    raw = pd.read_csv(path)
    trace = _build(name="csv", path=path, num_requests=40, replace=False, min_len=1,
                   max_prompt_len=None, max_model_len=100_000)  # fmt: skip
    assert sorted(trace.table["prompt_len"]) == sorted(raw["num_prefill_tokens"])
    assert trace.dropped == {}
    with pytest.raises(ConfigError, match="only 40 requests remain"):
        _build(name="csv", path=path, num_requests=41, replace=False, min_len=1,
               max_prompt_len=None, max_model_len=100_000)  # fmt: skip


def test_replay_uses_scaled_timestamps(data_dir):
    path = str(data_dir / "trace_processed.csv")
    raw = pd.read_csv(path)
    replay = ArrivalSpec(process="replay", time_scale=2.0)
    trace = _build(name="csv", path=path, num_requests=None, arrivals=replay, min_len=1,
                   max_prompt_len=None, max_model_len=100_000)  # fmt: skip
    np.testing.assert_allclose(trace.table["arrival_s"], raw["arrived_at"] / 2.0)
    np.testing.assert_array_equal(trace.table["output_len"], raw["num_decode_tokens"])
    short = _build(name="csv", path=path, num_requests=None, duration_s=5.0, arrivals=replay,
                   min_len=1, max_prompt_len=None, max_model_len=100_000)  # fmt: skip
    assert len(short) == int((raw["arrived_at"] / 2.0 < 5.0).sum())
    first10 = _build(name="csv", path=path, num_requests=10, arrivals=replay, min_len=1,
                     max_prompt_len=None, max_model_len=100_000)  # fmt: skip
    pd.testing.assert_frame_equal(first10.table, trace.table.iloc[:10])


def test_replay_drops_filtered_rows_and_reports_them(data_dir):
    path = str(data_dir / "trace_processed.csv")
    raw = pd.read_csv(path)
    trace = _build(name="csv", path=path, num_requests=None, arrivals=ArrivalSpec(process="replay"))
    too_long = int((raw["num_prefill_tokens"] > 1024).sum())
    assert trace.dropped.get("prompt_len > 1024", 0) == too_long > 0
    assert len(trace) + sum(trace.dropped.values()) == 40


def test_replay_needs_timestamps():
    with pytest.raises(ConfigError, match="timestamped"):
        _build(name="sharegpt", arrivals=ArrivalSpec(process="replay"))
    with pytest.raises(ConfigError, match="timestamped"):
        _build(name="synthetic", arrivals=ArrivalSpec(process="replay"))


def test_sharing_shapes():
    trace = _build(name="synthetic", num_requests=50, n=4, shared_prefix_len=100,
                   prompt=LengthDist(dist="uniform", low=4, high=50))  # fmt: skip
    t = trace.table
    assert (t["n"] == 4).all() and (t["beam_width"] == 1).all()
    assert all(segs[0] == (0, 100) and len(segs) == 2 for segs in t["segments"])
    own_ids = [segs[1][0] for segs in t["segments"]]
    assert len(set(own_ids)) == 50 and 0 not in own_ids
    assert np.array_equal(_segments_sum(trace), t["prompt_len"].to_numpy())
    beam = _build(name="alpaca-like", num_requests=20, beam_width=6)
    assert (beam.table["beam_width"] == 6).all() and (beam.table["n"] == 1).all()


def test_shared_prefix_counts_toward_filters():
    trace = _build(name="synthetic", num_requests=10, shared_prefix_len=1000,
                   prompt=LengthDist(dist="uniform", low=10, high=40))  # fmt: skip
    assert (trace.table["prompt_len"] <= 1024).all()
    assert trace.dropped["prompt_len > 1024 (redrawn)"] > 0


def test_duration_mode():
    trace = _build(name="alpaca-like", num_requests=None, duration_s=60.0)
    arr = trace.table["arrival_s"].to_numpy()
    assert (arr < 60.0).all()
    assert abs(len(trace) - 240) < 5 * np.sqrt(240)


def test_synthetic_that_never_passes_filters_is_an_error():
    with pytest.raises(ConfigError, match="keep breaking the filters"):
        _build(name="synthetic", num_requests=5, prompt=LengthDist(dist="fixed", mean=3000))


def test_unknown_workload_lists_names():
    from pydantic import ValidationError

    with pytest.raises(
        ValidationError, match="unknown workload 'nope'; allowed: .*azure-conv.*sharegpt"
    ):
        _build(name="nope")


def test_bad_paths():
    with pytest.raises(ConfigError, match="needs workload.path"):
        _build(name="csv")
    with pytest.raises(ConfigError, match="not by the synthetic 'alpaca-like'"):
        _build(name="alpaca-like", path="x.csv")
    with pytest.raises(DataError, match="missing.csv: file not found"):
        _build(name="csv", path="missing.csv")


def test_unprepared_table_says_how_to_prepare():
    if WORKLOADS["alpaca"].is_prepared:
        pytest.skip("alpaca table prepared locally")
    with pytest.raises(DataError, match="pagesim workload prepare alpaca --source"):
        _build(name="alpaca")


def test_no_count_and_no_duration():
    with pytest.raises(ConfigError, match="num_requests or workload.duration_s"):
        _build(name="sharegpt", num_requests=None)


def test_describe():
    d = _build(name="sharegpt", num_requests=500).describe()
    assert d["num_requests"] == 500 and d["rate_req_s"] > 0
    assert any(k.startswith("dropped[") for k in d)


def test_million_synthetic_requests():
    trace = _build(name="synthetic", num_requests=1_000_000,
                   prompt=LengthDist(dist="lognormal", mean=161.0, cv=1.0, high=1024))  # fmt: skip
    assert len(trace) == 1_000_000
    assert trace.table["segments"].iloc[-1] == ((1_000_000, trace.table["prompt_len"].iloc[-1]),)
