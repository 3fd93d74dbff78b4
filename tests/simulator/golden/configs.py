"""The seeded configurations of the engine goldens (``make_goldens.py``, ``test_goldens.py``).

Together they cover every scheduler (vllm, vllm-paper, vllm-v1, orca, static) and
allocator (paged, paged-v1; max, pow2, oracle on buddy and first-fit heaps), preemption by recompute and by swap, swap
aborts, the watermark, token and sequence caps, prompts over the limit, requests that
never fit, time limits, sample windows and ``every_step``, invariant checking, beam
search, parallel sampling and prefix caching:

- ``random_doc``: every scheduler and allocator, with parallel sampling, beam search
  and prefix caching mixed in;
- ``in_scope_doc``: vllm on the paged pool, one sequence per request, stressed (pools
  small enough to preempt on most steps, tiny CPU swap spaces, binding caps);
- ``orca_doc``: Orca over every reservation policy, heap and granule size;
- ``sharing_docs``: beam search, parallel sampling and prefix caching at larger sizes,
  with swapping of multi-sequence groups;
- ``paper_docs``: the beam ancestry model, vllm-paper and the pinned prefix;
- ``v1_doc``: vllm-v1 on paged-v1, stressed.
"""

from __future__ import annotations

import numpy as np


def random_doc(seed: int) -> dict:
    """One random small configuration; ``seed`` picks every choice and the run's seed."""
    rng = np.random.default_rng(seed)
    sched = str(rng.choice(["vllm", "vllm", "vllm", "orca", "static"]))
    alloc = "paged" if sched == "vllm" else str(rng.choice(["max", "pow2", "oracle"]))
    sharing = str(rng.choice(["none", "none", "none", "n", "beam"]))
    num_requests = int(rng.integers(30, 90) if sched == "vllm" else rng.integers(10, 30))
    workload = {"name": "sharegpt", "num_requests": num_requests}
    if sharing == "n":
        workload["n"] = int(rng.integers(2, 5))
    elif sharing == "beam":
        workload["beam_width"] = int(rng.integers(2, 5))
    allocator = {"kind": alloc}
    if alloc == "paged":
        allocator["block_size"] = int(rng.choice([1, 8, 16, 32]))
        if rng.random() < 0.3:
            allocator["prefix_caching"] = True
            workload["shared_prefix_len"] = int(rng.choice([32, 64]))
    doc = {
        "workload": workload,
        "arrivals": {"rate_req_s": float(rng.choice([1.0, 4.0, 16.0]))},
        "hardware": {"kv_slots": int(rng.choice([2048, 4096, 16384]))},
        "allocator": allocator,
        "scheduler": {"kind": sched},
        "metrics": {"sample_interval_s": float(rng.choice([0.05, 1.0, 10.0]))},
        "seed": seed,
    }
    if sched == "vllm":
        doc["scheduler"]["preemption_mode"] = str(rng.choice(["auto", "recompute", "swap"]))
        doc["scheduler"]["max_num_seqs"] = int(rng.choice([8, 64, 256]))
        doc["allocator"]["swap_space_gib"] = float(rng.choice([0.01, 4.0]))
    if rng.random() < 0.2:
        doc["max_sim_time_s"] = float(rng.choice([3.0, 10.0]))
    if rng.random() < 0.1:
        doc["metrics"]["every_step"] = True
    return doc


def in_scope_doc(seed: int) -> dict:
    """vllm on the paged pool, one sequence per request, built to hit every event."""
    rng = np.random.default_rng(1000 + seed)
    arrivals = {"process": str(rng.choice(["poisson", "poisson", "gamma", "burst"]))}
    if arrivals["process"] != "burst":
        arrivals["rate_req_s"] = float(rng.choice([1.0, 4.0, 16.0, 64.0]))
    if arrivals["process"] == "gamma":
        arrivals["cv"] = float(rng.choice([0.5, 3.0]))
    doc = {
        "workload": {
            "name": str(rng.choice(["sharegpt", "alpaca-like"])),
            "num_requests": int(rng.integers(20, 100)),
        },
        "arrivals": arrivals,
        "hardware": {"kv_slots": int(rng.choice([300, 700, 1500, 3000, 8000, 60000]))},
        "allocator": {
            "kind": "paged",
            "block_size": int(rng.choice([1, 4, 16, 32, 128])),
            "watermark": float(rng.choice([0.0, 0.01, 0.1])),
            "swap_space_gib": float(rng.choice([0.0005, 0.005, 4.0])),
        },
        "scheduler": {
            "kind": "vllm",
            "preemption_mode": str(rng.choice(["auto", "recompute", "swap"])),
            "max_num_seqs": int(rng.choice([2, 8, 64, 256])),
            "max_num_batched_tokens": int(rng.choice([512, 2560])),
        },
        "metrics": {"sample_interval_s": float(rng.choice([0.05, 1.0, 10.0]))},
        "max_model_len": int(rng.choice([512, 2048])),
        "seed": seed,
    }
    if rng.random() < 0.25:
        doc["max_sim_time_s"] = float(rng.choice([2.0, 10.0, 30.0]))
    if rng.random() < 0.15:
        doc["metrics"]["every_step"] = True
    if rng.random() < 0.3:
        doc["check_invariants"] = True
    return doc


def orca_doc(seed: int) -> dict:
    """A random Orca configuration: every reservation
    policy and heap, granule sizes, pools small enough to block and to never fit."""
    rng = np.random.default_rng(2000 + seed)
    policy = str(rng.choice(["max", "pow2", "oracle"]))
    arrivals = {"process": str(rng.choice(["poisson", "gamma", "burst"]))}
    if arrivals["process"] != "burst":
        arrivals["rate_req_s"] = float(rng.choice([1.0, 8.0, 64.0]))
    max_model_len = int(rng.choice([512, 2048]))
    kv_slots = int(rng.choice([300, 1500, 4000, 16000]))
    if policy == "max":
        kv_slots = max(kv_slots, max_model_len)
    doc = {
        "workload": {
            "name": str(rng.choice(["sharegpt", "alpaca-like"])),
            "num_requests": int(rng.integers(20, 80)),
        },
        "arrivals": arrivals,
        "hardware": {"kv_slots": kv_slots},
        "allocator": {
            "kind": policy,
            "placement": str(rng.choice(["buddy", "first_fit"])),
            "granule_slots": int(rng.choice([1, 16, 64])),
        },
        "scheduler": {"kind": "orca", "max_num_seqs": int(rng.choice([2, 8, 256]))},
        "metrics": {"sample_interval_s": float(rng.choice([0.05, 1.0, 10.0]))},
        "max_model_len": max_model_len,
        "seed": seed,
    }
    if rng.random() < 0.25:
        doc["max_sim_time_s"] = float(rng.choice([2.0, 10.0]))
    if rng.random() < 0.15:
        doc["metrics"]["every_step"] = True
    if rng.random() < 0.3:
        doc["check_invariants"] = True
    return doc


def sharing_docs() -> dict[str, dict]:
    """Beam search, parallel sampling and prefix caching, each under memory pressure."""
    base = {
        "arrivals": {"rate_req_s": 8.0},
        "hardware": {"kv_slots": 6000},
        "metrics": {"sample_interval_s": 0.5},
    }
    return {
        "beam4_swap": {
            **base,
            "workload": {"name": "alpaca-like", "num_requests": 60, "beam_width": 4},
            "allocator": {"kind": "paged", "block_size": 16, "swap_space_gib": 0.05},
            "seed": 3,
        },
        "n4_recompute": {
            **base,
            "workload": {"name": "sharegpt", "num_requests": 60, "n": 4},
            "allocator": {"kind": "paged", "block_size": 8},
            "scheduler": {"kind": "vllm", "preemption_mode": "recompute"},
            "seed": 4,
        },
        "prefix_shared": {
            **base,
            "workload": {"name": "sharegpt", "num_requests": 120, "shared_prefix_len": 200},
            "allocator": {"kind": "paged", "block_size": 16, "prefix_caching": True},
            "check_invariants": True,
            "seed": 5,
        },
        "prefix_chat": {
            **base,
            "workload": {"name": "sharegpt", "num_requests": 80, "shared_prefix_len": 64, "n": 2},
            "allocator": {"kind": "paged", "block_size": 4, "prefix_caching": True},
            "seed": 6,
        },
        "beam2_orca": {
            **base,
            "workload": {"name": "alpaca-like", "num_requests": 40, "beam_width": 2},
            "allocator": {"kind": "oracle"},
            "scheduler": {"kind": "orca"},
            "seed": 7,
        },
        "n3_static": {
            **base,
            "workload": {"name": "alpaca-like", "num_requests": 40, "n": 3},
            "allocator": {"kind": "pow2", "placement": "first_fit"},
            "scheduler": {"kind": "static", "max_batch_size": 8},
            "seed": 8,
        },
    }


def paper_docs() -> dict[str, dict]:
    """What the paper suite added after the first goldens: the beam ancestry model
    (``beam_keep_prob``), the artifact's prototype scheduler (``vllm-paper``, which
    admits a group with all its sequences) and the pinned prefix. Written by the build
    before the beam steps were batched (``make_goldens.py --only``), so that those
    faster paths are held to the slower ones."""
    base = {
        "arrivals": {"rate_req_s": 8.0},
        "hardware": {"kv_slots": 6000},
        "metrics": {"sample_interval_s": 0.5},
    }
    return {
        "beam4_keep85": {
            **base,
            "workload": {"name": "alpaca-like", "num_requests": 60, "beam_width": 4},
            "allocator": {"kind": "paged", "block_size": 16, "swap_space_gib": 0.05},
            "scheduler": {"kind": "vllm", "beam_keep_prob": 0.85},
            "seed": 9,
        },
        "beam3_keep50_paper": {
            **base,
            "workload": {"name": "alpaca-like", "num_requests": 50, "beam_width": 3},
            "allocator": {"kind": "paged", "block_size": 8},
            "scheduler": {"kind": "vllm-paper", "beam_keep_prob": 0.5},
            "seed": 10,
        },
        "n3_paper": {
            **base,
            "workload": {"name": "alpaca-like", "num_requests": 50, "n": 3},
            "allocator": {"kind": "paged", "block_size": 16},
            "scheduler": {"kind": "vllm-paper"},
            "seed": 11,
        },
        "prefix_pinned": {
            **base,
            "workload": {"name": "sharegpt", "num_requests": 100, "shared_prefix_len": 120},
            "allocator": {"kind": "paged", "block_size": 16, "prefix_caching": "pinned"},
            "check_invariants": True,
            "seed": 12,
        },
    }


def v1_doc(seed: int) -> dict:
    """vLLM V1's scheduler on its KV cache manager, stressed: pools small enough to
    preempt, budgets small enough to chunk prompts, the long-prefill threshold, v0.15.1's
    admission, shared prefixes with and without caching. Written by the build that added
    them (``make_goldens.py --only``)."""
    rng = np.random.default_rng(3000 + seed)
    arrivals = {"process": str(rng.choice(["poisson", "poisson", "gamma", "burst"]))}
    if arrivals["process"] != "burst":
        arrivals["rate_req_s"] = float(rng.choice([2.0, 8.0, 32.0]))
    if arrivals["process"] == "gamma":
        arrivals["cv"] = float(rng.choice([0.5, 3.0]))
    workload = {
        "name": str(rng.choice(["sharegpt", "alpaca-like"])),
        "num_requests": int(rng.integers(30, 100)),
    }
    if rng.random() < 0.5:
        workload["shared_prefix_len"] = int(rng.choice([24, 64, 200]))
    max_model_len = int(rng.choice([1024, 2048]))
    doc = {
        "workload": workload,
        "arrivals": arrivals,
        "hardware": {"kv_slots": int(rng.choice([2200, 4000, 8000, 60000]))},
        "allocator": {
            "kind": "paged-v1",
            "block_size": int(rng.choice([1, 8, 16, 32])),
            "prefix_caching": bool(rng.random() < 0.75),
        },
        "scheduler": {
            "kind": "vllm-v1",
            "max_num_seqs": int(rng.choice([4, 32, 256])),
            "max_num_batched_tokens": int(rng.choice([64, 512, 2048])),
            "long_prefill_token_threshold": int(rng.choice([0, 0, 48, 256])),
            "reserve_full_prompt": bool(rng.random() < 0.7),
        },
        "metrics": {"sample_interval_s": float(rng.choice([0.05, 1.0, 10.0]))},
        "max_model_len": max_model_len,
        "seed": seed,
    }
    if rng.random() < 0.2:
        doc["max_sim_time_s"] = float(rng.choice([3.0, 10.0]))
    if rng.random() < 0.2:
        doc["metrics"]["every_step"] = True
    if rng.random() < 0.4:
        doc["check_invariants"] = True
    return doc


def golden_configs() -> dict[str, dict]:
    """Every golden configuration by its file name."""
    docs = {f"random_{s:02d}": random_doc(s) for s in range(24)}
    docs.update({f"vllm_{s:02d}": in_scope_doc(s) for s in range(40)})
    docs.update({f"orca_{s:02d}": orca_doc(s) for s in range(24)})
    docs.update(sharing_docs())
    docs.update(paper_docs())
    docs.update({f"v1_{s:02d}": v1_doc(s) for s in range(8)})
    return docs
