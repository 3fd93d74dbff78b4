"""Real vLLM 0.15.1 (V1) on H100 from inference-sim: the reader of the validation.

Scenario: inference-sim (GitHub ``inference-sim/training``, commit ed5c1d2,
``default_args/``; no licence file: used here for validation only, not redistributed)
measured vLLM v0.15.1 on H100 SXM with inference-perf's shared-prefix client
(:mod:`pagesim.records.inference_perf`): 16 experiments (Llama-2-7B TP1, Llama-2-70B
TP4, CodeLlama-34B TP2, Mixtral-8x7B TP2; four workloads each), each a few constant-rate
stages of 600 s, with only aggregates per stage (``results/stage_N_lifecycle_metrics.json``:
E2E, TTFT, ITL and TPOT means and percentiles). Every stage that kept up (no failure, its
achieved rate within 5% of the rate asked) is replayed on its own: its requests as the
client generated them (the resolved configuration: 10 system prompts x 10 questions,
prompts repeating, so prefix caching hits), through ``vllm-v1`` over ``paged-v1`` with the
server's settings (``exp-config.yaml``: ``max_num_seqs``, ``max_num_batched_tokens``,
``max_model_len``; TP) and V1's memory model's pool at ``gpu_memory_utilization`` 0.9
(vLLM's default: the runs record none).

Cost models: ``kernels`` (headline): the shipped ``h100-sxm-vidur`` (GEMMs fitted on Vidur's
H100 operator tables; its attention projected from A100 timings, said in its terms'
``origin``); ``analytic``; ``iterations``: each stage's model's whole steps timed on an
H100 by ``benchmarks/gpu_iterations.py`` (the shipped ``h100-sxm-*-iterations``; a
shard's at TP > 1, the all-reduces added analytic; decided before any replay under it,
``h100_protocol.md`` and its second addendum);
``iterations-compiled`` and ``iterations-compiled+async``, the same stages, post hoc
(the layer through ``torch.compile``, measured after the ``iterations`` replay was seen;
the protocol's addenda). The headline's intervals (``INTERVALS``,
``h100_intervals_protocol.md``) draw each stage's requests again from the client's
generator. Not modelled, and said on the page: the Mixtral experiments (mixture of experts), the
server's 8 GiB CPU KV offload, the prefix cache carried from one stage to the next, the
client's streaming cost. The client's ITL and TPOT count every
streamed line, separators included (inference-sim's notes): they read about half the
real inter-token time, so the goals are on E2E and TTFT, and ITL is reported as is.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.experiments.validation import vcsv
from pagesim.experiments.validation.compare import Goal
from pagesim.experiments.validation.report import pct
from pagesim.experiments.validation.study import CostModelChoice, Study, ValidationRun
from pagesim.records.run import RECORD_COLUMNS, MeasuredRun

NAME = "inference_sim_h100_v0151"
TITLE = "vLLM 0.15.1 (V1) on H100 from inference-sim (shared-prefix client, constant-rate stages)"
COMMAND = (
    "pagesim validate-vllm --data DATA/inference_sim_h100_v0151 --out OUT "
    "--docs docs/validation_h100.md"
)
MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
    "mistralai/Mixtral-8x7B-v0.1": None,
}
#: validation.csv's metric -> the lifecycle metrics' name
STATS = {
    "e2e": "request_latency",
    "ttft": "time_to_first_token",
    "itl": "inter_token_latency",
}
PROFILE = "h100-sxm-vidur"
#: whole steps of Llama-2-7B timed on an H100 by pagesim (``h100_protocol.md``: decided,
#: with where it is used, before any replay under it)
ITERATIONS_PROFILE = "h100-sxm-llama-2-7b-iterations"
#: each dense model's whole-step profile at its runs' TP (the shards' steps, all-reduces
#: added by the simulator; h100_protocol.md, addendum 2)
ITERATIONS_PROFILES = {
    ("llama-2-7b", 1): ITERATIONS_PROFILE,
    ("codellama-34b", 2): "h100-sxm-codellama-34b-tp2-iterations",
    ("llama-2-70b", 4): "h100-sxm-llama-2-70b-tp4-iterations",
}
#: the same steps with the layer through torch.compile: POST HOC (Llama-2-7B measured after
#: the first replay under ITERATIONS_PROFILE had been seen, h100_protocol.md's addendum; the
#: shards after every replay above, its addendum 3)
COMPILED_PROFILE = "h100-sxm-llama-2-7b-compiled-iterations"
COMPILED_PROFILES = {
    ("llama-2-7b", 1): COMPILED_PROFILE,
    ("codellama-34b", 2): "h100-sxm-codellama-34b-tp2-compiled-iterations",
    ("llama-2-70b", 4): "h100-sxm-llama-2-70b-tp4-compiled-iterations",
}
#: the compiled steps replayed with async scheduling (h100_protocol.md, addendum 3)
COMPILED_ASYNC = "iterations-compiled+async"
#: the headline replayed with vLLM's async scheduling (async_scheduling_protocol.md)
ASYNC = "kernels+async"
#: the same with each step's host overhead overlapping its GPU work (the addendum)
ASYNC_OVERLAP = "kernels+async-overlap"


class HostOverlapped:
    """A cost model whose steps last max(GPU work, host overhead) instead of their sum:
    ``inner``'s step time less its ``step_overhead`` term, against that term
    (``async_scheduling_protocol.md``, addendum). The engine's interface: ``step_time_s``,
    ``decode_time_fn``, ``description``."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.description = (
            f"{inner.description}; each step's host overhead (step_overhead) overlapping "
            "its GPU work: max, not sum"
        )

    def step_time_s(self, plan) -> float:
        t = self.inner.step_time_s(plan)
        if plan.is_empty:
            return t
        host = self.inner.step_overhead_time_s(plan.num_seqs, plan.num_tokens)
        return max(t - host, host)

    def decode_time_fn(self, *, is_paged: bool = True):
        decode = self.inner.decode_time_fn(is_paged=is_paged)
        overhead = self.inner.step_overhead_time_s

        def time_s(num_seqs: int, context_sum: int, num_blocks: int) -> float:
            host = overhead(num_seqs, num_seqs)
            return max(decode(num_seqs, context_sum, num_blocks) - host, host)

        return time_s


def _host_overlapped(vrun: ValidationRun) -> HostOverlapped:
    """The headline's cost model for ``vrun``, its host overhead overlapped."""
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    hw = vrun.settings["hardware"]
    return HostOverlapped(
        cost_model_for(
            PROFILE,
            get_model(hw["model"]),
            get_gpu(hw["gpu"]),
            tensor_parallel=hw["tensor_parallel"],
        )
    )


#: how the headline's intervals are made (h100_intervals_protocol.md, decided before any was
#: computed): each replicate draws the stage's requests again from the client's generator
#: and the kernel terms' multipliers; the factor fitted leaving one experiment out
INTERVALS = SimpleNamespace(
    nominal=0.9, replicates=10, sources=["seeds", "cost"], seed=0, group="experiment"
)

GOAL_E2E = 0.10
GOAL_TTFT = 0.20
#: the best published figures on that peer's own data (the issue's)
PEER_E2E, PEER_TTFT = 0.067, 0.176


def recognise(folder: Path) -> bool:
    return any(folder.glob("*/results/stage_0_lifecycle_metrics.json"))


def _read_yaml(path: Path) -> dict:
    from pagesim import yamlio

    doc = yamlio.read(path, "inference-sim experiment file")
    if not isinstance(doc, dict):
        raise DataError(f"{path}: expected a mapping")
    return doc


def _stage_metrics(path: Path) -> dict:
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable JSON file ({exc})") from None
    return doc


def read_runs(folder: Path, seed: int = 0) -> tuple[list[ValidationRun], list[str]]:
    """Every stage that kept up, ready to replay; a line for each that is not replayed."""
    from pagesim.records.inference_perf import read_client, shared_prefix_trace

    runs, skipped = [], []
    for exp in sorted(p for p in folder.iterdir() if (p / "exp-config.yaml").is_file()):
        cfg = _read_yaml(exp / "exp-config.yaml")
        model = MODELS.get(str(cfg.get("model")), "")
        short = exp.name.split("-", 2)[-1]
        if model is None:
            skipped.append(f"{short}: a mixture-of-experts model (experts are not modelled)")
            continue
        if not model:
            skipped.append(f"{short}: model {cfg.get('model')!r} unknown to pagesim")
            continue
        client = read_client(exp)
        trace = shared_prefix_trace(client, np.random.default_rng(seed))
        start = 0
        for i, stage in enumerate(client.stages):
            n = stage.num_requests
            metrics = _stage_metrics(exp / "results" / f"stage_{i}_lifecycle_metrics.json")
            failures = int(metrics.get("failures", {}).get("count", 0) or 0)
            load = metrics.get("load_summary", {})
            achieved = float(load.get("achieved_rate", 0.0) or 0.0)
            part = trace.table.iloc[start : start + n]
            start += n
            if failures or achieved < 0.95 * stage.rate_req_s:
                skipped.append(
                    f"{short} stage {i} ({stage.rate_req_s:g} req/s): overloaded "
                    f"({failures} failures, {achieved:.2f} req/s achieved)"
                )
                continue
            stage_trace = _stage_trace(trace, part, f"{short}-s{i}")
            redraw = functools.partial(_redraw_stage, client, start - n, n, f"{short}-s{i}")
            run = MeasuredRun(
                name=f"{short}/s{i}",
                dataset=NAME,
                table=pd.DataFrame(columns=list(RECORD_COLUMNS)),
                rate_req_s=stage.rate_req_s,
                sources=((str(exp / "results" / f"stage_{i}_lifecycle_metrics.json"), ""),),
                meta={"latency": metrics["successes"]["latency"], "count": n},
            )
            settings = {
                "hardware": {
                    "model": model,
                    "gpu": "h100-sxm",
                    "tensor_parallel": int(cfg.get("tensor_parallelism", 1)),
                    "gpu_memory_utilization": 0.9,
                },
                "allocator": {"kind": "paged-v1", "block_size": 16, "prefix_caching": True},
                "scheduler": {
                    "kind": "vllm-v1",
                    "max_num_seqs": int(cfg.get("max_num_seqs", 256)),
                    "max_num_batched_tokens": int(cfg.get("max_num_batched_tokens", 2048)),
                    # v0.15.1 admits on the first chunk (vllm_versions.md); no stage here
                    # comes near the pool, so the replays are the same either way
                    "reserve_full_prompt": False,
                },
                "max_model_len": int(cfg.get("max_model_len", 4096)),
            }
            runs.append(
                ValidationRun(
                    run=run,
                    launch=short.rsplit("-", 1)[0],
                    role="held_out",
                    settings=settings,
                    evidence=f"{n:,} requests; {client.num_groups} x {client.num_prompts_per_group} prompts",
                    trace=stage_trace,
                    info={"experiment": short},
                    redraw=redraw,
                )
            )
    if not runs:
        raise DataError(f"--data {folder}: no stage pagesim can replay ({'; '.join(skipped)})")
    return runs, skipped


def _redraw_stage(client, start: int, n: int, name: str, seed: int):
    """The stage's requests as the client's generator draws them with ``seed`` (the
    intervals' ``seeds`` source; seed 0 gives the replayed requests)."""
    from pagesim.records.inference_perf import shared_prefix_trace

    trace = shared_prefix_trace(client, np.random.default_rng(seed))
    return _stage_trace(trace, trace.table.iloc[start : start + n], name)


def _stage_trace(trace, part: pd.DataFrame, name: str):
    """One stage's requests, from its first at 0."""
    from pagesim.workloads.assemble import assemble_trace

    arrival = part["arrival_s"].to_numpy(dtype=float)
    return assemble_trace(
        prompt_len=part["prompt_len"].to_numpy(dtype=np.int64),
        output_len=part["output_len"].to_numpy(dtype=np.int64),
        arrival_s=arrival - arrival[0],
        segments=list(part["segments"]),
        name=name,
        source_note=trace.source_note,
    )


def _iteration_profiles(vruns, table: dict = ITERATIONS_PROFILES) -> dict[str, str]:
    """Each dense stage's whole-step profile in ``table`` (its model at its TP;
    h100_protocol.md)."""
    out = {}
    for v in vruns:
        hw = v.settings["hardware"]
        profile = table.get((hw["model"], hw.get("tensor_parallel", 1)))
        if profile is not None:
            out[v.name] = profile
    return out


def prepare(folder: Path, out_dir: Path) -> Study:
    vruns, skipped = read_runs(Path(folder))
    profiles = _iteration_profiles(vruns)
    compiled = _iteration_profiles(vruns, COMPILED_PROFILES)
    return Study(
        dataset=NAME,
        title=TITLE,
        runs=vruns,
        cost_models=[
            CostModelChoice("analytic", None, note="the H100 spec's roofline, nothing fitted"),
            CostModelChoice(
                "kernels",
                PROFILE,
                headline=True,
                note="Vidur's H100 operator tables, attention projected from A100; nothing "
                "fitted on these runs",
            ),
            CostModelChoice(
                "iterations",
                ITERATIONS_PROFILE,
                note="whole steps of each stage's model timed on an H100 by pagesim (a "
                "PyTorch forward of its shard under CUDA graphs, no host time; at TP > 1 the "
                "all-reduces added, analytic): h100-sxm-llama-2-7b-iterations, "
                "h100-sxm-codellama-34b-tp2-iterations, h100-sxm-llama-2-70b-tp4-iterations "
                "(experiments/validation/h100_protocol.md); nothing fitted on these runs",
                per_run=profiles,
                runs=frozenset(profiles),
            ),
            CostModelChoice(
                "iterations-compiled",
                COMPILED_PROFILE,
                note="POST HOC: the same steps with the layer through torch.compile, measured "
                "after the iterations replay had been seen (h100_protocol.md, addendum; the "
                "TP-2 and TP-4 shards, addendum 3): h100-sxm-llama-2-7b-compiled-iterations, "
                "h100-sxm-codellama-34b-tp2-compiled-iterations, "
                "h100-sxm-llama-2-70b-tp4-compiled-iterations; never the headline, not scored",
                per_run=compiled,
                runs=frozenset(compiled),
                post_hoc=True,
            ),
            CostModelChoice(
                COMPILED_ASYNC,
                COMPILED_PROFILE,
                note="POST HOC: iterations-compiled with vLLM's async scheduling (v0.15.1's "
                "default; no host time added: a graph-replayed step holds none and the engine "
                "prepares the next step while one runs; h100_protocol.md, addendum 3); never "
                "the headline, not scored",
                per_run=compiled,
                runs=frozenset(compiled),
                post_hoc=True,
                scheduler={"async_scheduling": True},
            ),
            CostModelChoice(
                ASYNC,
                PROFILE,
                note="POST HOC: the headline with vLLM's async scheduling, which v0.15.1 runs "
                "by default (scheduler rule 6; experiments/validation/async_scheduling_protocol.md, "
                "written after this page's TTFTs had been seen); never the headline, not scored",
                runs=frozenset(v.name for v in vruns),
                post_hoc=True,
                scheduler={"async_scheduling": True},
            ),
            CostModelChoice(
                ASYNC_OVERLAP,
                None,
                make=_host_overlapped,
                note="POST HOC: kernels+async with each step's host overhead (the profile's "
                "step_overhead, Vidur's vLLM v0 CPU time) overlapping the GPU's work, max "
                "instead of sum (async_scheduling_protocol.md, addendum); never the headline, "
                "not scored",
                runs=frozenset(v.name for v in vruns),
                post_hoc=True,
                scheduler={"async_scheduling": True},
            ),
        ],
        command=COMMAND,
        intervals=INTERVALS,
        extra={"skipped": skipped},
    )


def closed_loop_rows(study: Study, vrun: ValidationRun, cost_name: str, rep) -> list[dict]:
    """Per metric: the replay's per-request values against the stage's aggregates."""
    latency = vrun.run.meta["latency"]
    req = rep.requests
    tpot = req["tpot_s"].to_numpy(dtype=float)
    predicted = {
        "e2e": req["e2e_s"].to_numpy(dtype=float),
        "ttft": req["ttft_s"].to_numpy(dtype=float),
        "itl": tpot,  # every gap of a request is its TPOT in a step-by-step replay, in the mean
    }
    role = next(c for c in study.cost_models if c.name == cost_name).role(vrun)
    rows = []
    for metric, key in STATS.items():
        stats = latency.get(key, {})
        measured = {"p50": stats.get("median"), "p90": stats.get("p90"), "mean": stats.get("mean")}
        for stat in vcsv.STATS:
            pred = vcsv.statistic(predicted[metric], stat) * 1e3
            meas = float(measured[stat]) * 1e3 if measured[stat] is not None else float("nan")
            rows.append(
                {
                    "dataset": study.dataset,
                    "run": vrun.name,
                    "rate": vrun.rate,
                    "launch": vrun.launch,
                    "role": role,
                    "cost_model": cost_name,
                    "headline": cost_name == study.headline.name,
                    "metric": metric,
                    "stat": stat,
                    "predicted_ms": pred,
                    "measured_ms": meas,
                    "error": pred / meas - 1 if meas > 0 else float("nan"),
                }
            )
    return rows


def open_loop_rows(study: Study, replays: dict) -> list[dict]:
    """None: aggregates only, no per-request records to reconstruct from."""
    return []


def _per_experiment(
    table: pd.DataFrame, study: Study, metric: str, cost: str | None = None
) -> pd.Series:
    """Per experiment: the mean |error| of ``metric``'s mean over its replayed stages
    (under ``cost``; default the headline)."""
    sub = table[
        (table["cost_model"] == (cost or study.headline.name))
        & (table["metric"] == metric)
        & (table["stat"] == "mean")
    ]
    exp = sub["run"].str.split("/").str[0]
    return sub["error"].abs().groupby(exp).mean()


def goals(study: Study, table: pd.DataFrame) -> list[Goal]:
    out = []
    for metric, bound, peer in (("e2e", GOAL_E2E, PEER_E2E), ("ttft", GOAL_TTFT, PEER_TTFT)):
        per = _per_experiment(table, study, metric)
        median = float(per.median()) if len(per) else float("nan")
        out.append(
            Goal(
                f"median over the experiments of the {metric.upper()} mean error <= {bound:.0%} "
                f"(the best published peer figure: {peer:.1%} on its own data)",
                bool(np.isfinite(median) and median <= bound),
                f"median {median:.1%} over {len(per)} experiments",
            )
        )
    return out


def _same_gpu_lines(study: Study, table: pd.DataFrame) -> list[str]:
    """The dense stages' mean E2E and TTFT under every cost model side by side: the
    whole-step profiles timed on an H100 (the compiled ones post hoc) beside the
    headline."""
    names = [c.name for c in study.cost_models if c.runs is not None]
    if not names:
        return []
    post_hoc = [c.name for c in study.cost_models if c.post_hoc]
    shown = [study.headline.name, *names]
    sel = table[table["cost_model"].isin(shown) & (table["stat"] == "mean")]
    sel = sel[sel["run"].isin(set(table.loc[table["cost_model"] == names[0], "run"]))]
    head = " | ".join(f"{n}{' (post hoc)' if n in post_hoc else ''}" for n in shown)
    lines = [
        "",
        "## Whole steps timed on an H100",
        "",
        "Mean E2E and TTFT, measured and each cost model's error: the headline beside the "
        "profiles of whole steps of each stage's model that pagesim timed on an H100 "
        "(`benchmarks/gpu_iterations.py`: a PyTorch forward of one GPU's shard under CUDA "
        "graphs, no host time; at TP > 1 the all-reduces added, analytic; "
        "`experiments/validation/h100_protocol.md` says which was decided before any "
        "replay and which after; — : not replayed under it; `iterations-compiled`: the same "
        f"forward through torch.compile, and `{COMPILED_ASYNC}` those steps under vLLM's "
        "async scheduling, nothing added to a step), and the headline replayed "
        f"with async scheduling (`{ASYNC}`; `{ASYNC_OVERLAP}` also overlaps each "
        "step's host overhead with its GPU work; post hoc: "
        "`experiments/validation/async_scheduling_protocol.md`).",
        "",
        f"| stage | rate | metric | measured ms | {head} |",
        "|---|---|---|---|" + "---|" * len(shown),
    ]
    for (run, metric), sub in sel.groupby(["run", "metric"], sort=False):
        if metric not in ("e2e", "ttft"):
            continue
        by = sub.set_index("cost_model")
        cells = " | ".join(pct(by.at[n, "error"]) if n in by.index else "—" for n in shown)
        lines.append(
            f"| {run} | {sub['rate'].iloc[0]:g} | {metric.upper()} | "
            f"{sub['measured_ms'].iloc[0]:,.1f} | {cells} |"
        )
    lines += [
        "",
        "The goals' statistic (per experiment the mean |error| over its replayed stages, then "
        "the median over the experiments) under each:",
        "",
        "| cost model | experiments | E2E | TTFT |",
        "|---|---|---|---|",
    ]
    for name in shown:
        e2e, ttft = (_per_experiment(table, study, m, name) for m in ("e2e", "ttft"))
        lines.append(
            f"| {name}{' (post hoc)' if name in post_hoc else ''} | {len(e2e)} | "
            f"{e2e.median():.1%} | {ttft.median():.1%} |"
        )
    return lines


def sections(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    lines = [
        "## The experiments",
        "",
        "Records: inference-sim (GitHub `inference-sim/training`, commit ed5c1d2; not copied "
        "here: the command reads them from `--data`). Per replayed stage, the headline's mean "
        "error of E2E, TTFT and the client's ITL (which counts the stream's separator lines: "
        "about half the real inter-token time):",
        "",
        "| stage | rate | E2E mean | TTFT mean | ITL mean |",
        "|---|---|---|---|---|",
    ]
    head = table[(table["cost_model"] == study.headline.name) & (table["stat"] == "mean")]
    for run, sub in head.groupby("run", sort=False):
        e = sub.set_index("metric")["error"]
        lines.append(
            f"| {run} | {sub['rate'].iloc[0]:g} | {pct(e['e2e'])} | {pct(e['ttft'])} | {pct(e['itl'])} |"
        )
    lines += ["", "Not replayed:", ""]
    lines += [f"- {line}" for line in study.extra["skipped"]]
    lines += _same_gpu_lines(study, table)
    lines += [
        "",
        "## What is not modelled",
        "",
        "- The Mixtral experiments (mixture of experts); the server's 8 GiB CPU KV offload; "
        "the prefix cache a stage inherits from the stages before it (each stage is replayed "
        "alone, from an empty cache); the client's own streaming cost.",
        "- The pool: V1's memory model at `gpu_memory_utilization` 0.9 (the runs record neither "
        "the setting nor the engine's block count); the profile's attention is projected from "
        "A100 timings (its terms' `origin` says so), and its only host time is the step "
        "overhead Vidur measured on an early-2024 vLLM v0 engine (the profile's notes), not "
        "V1's.",
        "- In the headline, vLLM's async scheduling (v0.15.1's default): admissions a step "
        "later, and the host overhead overlapped with the GPU step instead of added to it. "
        f"Both are in the post hoc `{ASYNC}` and `{ASYNC_OVERLAP}` above "
        "(`experiments/validation/async_scheduling_protocol.md`), not in the goals.",
    ]
    return lines
