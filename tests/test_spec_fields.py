"""Every RunSpec field is read by some component: a field that nothing reads would be
silently ignored by every simulation (the way a second engine once ignored new fields).

The test builds a few specs that together exercise every scheduler, allocator family,
arrival process and length distribution, then simulates them while recording which
fields of which spec sections are read (after validation, so a validator's reads do not
count). A field added to any section that no component reads fails here, naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pagesim.simulator import simulate
from pagesim.simulator.spec import RunSpec, run_spec_from_dict
from pagesim.specbase import StrictSpec

DOCS = [
    {
        "workload": {"name": "sharegpt", "num_requests": 40, "shared_prefix_len": 32, "n": 2},
        "arrivals": {"process": "gamma", "rate_req_s": 8.0, "cv": 2.0},
        "hardware": {"kv_slots": 4096},
        "allocator": {"kind": "paged", "prefix_caching": True, "swap_space_gib": 0.01},
        "scheduler": {"kind": "vllm", "preemption_mode": "swap"},
        "metrics": {
            "every_step": True,
            "reducers": ["time-weighted"],
            "percentiles": [50.0, 99.0],
            "slo": {"ttft_ms": 500.0, "tpot_ms": 80.0, "e2el_ms": 20000.0},
        },
        "max_sim_time_s": 30.0,
        "check_invariants": True,
    },
    {
        "workload": {
            "name": "synthetic",
            "num_requests": 30,
            "prompt": {"dist": "zipf", "mean": 64.0, "a": 1.5, "low": 4, "high": 512},
            "output": {"dist": "lognormal", "mean": 32.0, "cv": 0.5},
            "beam_width": 2,
        },
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
        "hardware": {"gpu": "a100-80gb", "kv_budget_gib": 1.0, "profile": "a100-80gb-vidur"},
        "allocator": {"kind": "pow2", "placement": "first_fit", "granule_slots": 8},
        "scheduler": {"kind": "orca", "max_num_seqs": 64},
        "spread": {"sources": ["cost", "serving"], "replicate": 1},
    },
    {
        "workload": {
            "name": "synthetic",
            "duration_s": 5.0,
            "replace": False,
            "prompt": {"dist": "uniform", "low": 8, "high": 64},
            "output": {"dist": "fixed", "mean": 16.0},
        },
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
        "hardware": {
            "model": "llama-2-7b",
            "tensor_parallel": 2,
            "gpu_memory_utilization": 0.5,
            "link": {"bus_bw_gbps": 40.0, "latency_us": 15.0, "source": "a test"},
        },
        "allocator": {"kind": "oracle"},
        "scheduler": {"kind": "static", "max_batch_size": 4},
        "metrics": {"sample_interval_s": 0.5},
        "max_model_len": 1024,
    },
    {
        "workload": {
            "name": "alpaca-like",
            "num_requests": 30,
            "min_len": 2,
            "max_prompt_len": 256,
        },
        "arrivals": {"process": "burst"},
        "allocator": {"kind": "paged", "block_size": 8, "watermark": 0.05},
        "scheduler": {"kind": "vllm", "max_num_batched_tokens": 1024, "max_num_seqs": 8},
        "seed": 3,
    },
    {
        "workload": {"name": "sharegpt", "duration_s": 4.0, "selection": "artifact"},
        "arrivals": {"process": "quantized-poisson", "rate_req_s": 4.0, "quantum_s": 0.02},
        "hardware": {"kv_slots": 4096},
    },
    {
        "workload": {"name": "sharegpt", "num_requests": 30},
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
        "hardware": {"kv_slots": 8192},
        "allocator": {"kind": "oracle", "placement": "artifact-buddy"},
        "scheduler": {"kind": "orca", "admission": "artifact", "max_num_batched_tokens": 2560},
    },
    {
        "workload": {"name": "sharegpt", "num_requests": 20},
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
        "hardware": {"kv_slots": 4096},
        "cluster": {"replicas": 2, "router": "least-kv", "sticky_fallback": "random"},
    },
    {
        "workload": {"name": "sharegpt", "num_requests": 20},
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
        "hardware": {"kv_slots": 4096},
        "disaggregation": {
            "prefill": {"tp": 1, "instances": 1, "max_batch_size": 64},
            "decode": {"tp": 1, "instances": 2, "max_tokens_per_batch": 4096},
            "link": {"bus_bw_gbps": 50.0, "latency_us": 5.0, "source": "test"},
            "waiting_block_prop_threshold": 0.1,
        },
    },
    {
        "workload": {"name": "sharegpt", "num_requests": 30, "n": 2},
        "arrivals": {"process": "poisson", "rate_req_s": 4.0},
        "hardware": {"kv_slots": 4096},
        "allocator": {"kind": "paged", "swap_space_gib": 20.0},
        "scheduler": {"kind": "vllm-paper", "max_num_seqs": 2048},
        "check_invariants": True,
    },
    {
        "workload": {"name": "sharegpt", "num_requests": 30, "shared_prefix_len": 32},
        "arrivals": {"process": "poisson", "rate_req_s": 8.0},
        "hardware": {"kv_slots": 4096},
        "allocator": {"kind": "paged-v1", "block_size": 16, "prefix_caching": True},
        "scheduler": {
            "kind": "vllm-v1",
            "max_num_batched_tokens": 512,
            "long_prefill_token_threshold": 256,
            "reserve_full_prompt": False,
        },
        "server": {
            "vllm_version": "0.23.0",
            "enforce_eager": True,
            "host_profile": "a100-80gb-vidur",
        },
    },
    {
        "workload": {"name": "csv", "path": "TRACE", "num_requests": None},
        "arrivals": {"process": "replay", "time_scale": 2.0},
        "hardware": {"profile": "PROFILE"},
    },
]


def spec_models(model=RunSpec, seen=None) -> dict[str, type[StrictSpec]]:
    """Every spec section class reachable from RunSpec, by name."""
    from pagesim.experiments.schema_paths import _model_in

    seen = {} if seen is None else seen
    seen[model.__name__] = model
    for field in model.model_fields.values():
        sub = _model_in(field.annotation)
        if sub is not None and sub.__name__ not in seen:
            spec_models(sub, seen)
    return seen


def test_every_run_spec_field_is_read_by_a_component(monkeypatch, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n"
        + "".join(f"{0.25 * i},{40 + 7 * i},{10 + i}\n" for i in range(20))
    )
    profile = Path(__file__).parent / "simulator" / "fixtures" / "tiny_profile.yaml"
    docs = json.loads(
        json.dumps(DOCS).replace("TRACE", str(trace)).replace("PROFILE", str(profile))
    )
    specs = [run_spec_from_dict(doc) for doc in docs]
    read: set[tuple[str, str]] = set()
    original = StrictSpec.__getattribute__

    def recording(self, name):
        cls = type(self)
        if name in cls.model_fields:
            read.add((cls.__name__, name))
        return original(self, name)

    monkeypatch.setattr(StrictSpec, "__getattribute__", recording)
    for spec in specs:
        try:
            simulate(spec)
        except Exception as exc:  # noqa: BLE001 - the reads are what this test is about
            pytest.fail(f"{spec.model_dump()} did not simulate: {exc}")
    monkeypatch.undo()
    unread = sorted(
        f"{name}.{field}"
        for name, model in spec_models().items()
        for field in model.model_fields
        if (name, field) not in read
    )
    assert not unread, f"spec fields no component reads: {unread}"
