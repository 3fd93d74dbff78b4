"""Real vLLM 0.19 (V1) runs from LLMServingSim: the reader of the validation.

Scenario: LLMServingSim 2.0 (GitHub ``casys-kaist/LLMServingSim``, commit 5daddb2, MIT)
published four runs of vLLM 0.19.0 (the V1 engine: chunked prefill, one token budget,
prefix caching on) with 300 ShareGPT requests each at about 10 req/s, the exact requests
with their token ids, and layer profiles of the same vLLM on the same GPUs
(:mod:`pagesim.records.llmservingsim`). Each dense run is replayed through pagesim's
``vllm-v1`` scheduler over the ``paged-v1`` allocator with the engine's own arguments
(``max_num_seqs``, ``max_num_batched_tokens``, block 16, prefix caching), the exact
prompts (their token ids give the prefix hits), the engine's arrival times, and the KV
pool the engine reported (``num_gpu_blocks``; where the run did not record it, V1's
memory model, :func:`~pagesim.simulator.memory.vllm_v1_pool`, its terms on the page).

Intervals (:mod:`.intervals`, fixed before any was computed): 40 replicates per run of
the headline, each drawing one multiplier per kernel term from its held-out residuals
(source ``cost``; there is no serving path), nominal 90%, the conformal factor fitted
leave-one-run-out over the three runs.

Cost models: ``kernels`` (headline): the profile imported from the same vLLM's layer
timings on the same GPU (``calibrate/llmservingsim.py``; nothing fitted on these runs),
with the mixed-step term of ``vllm019_mixed_protocol.md``; :data:`ADDITIVE`: the same
profile without that term (a mixed step's attention as its two parts' sum);
``analytic``: the roofline of the GPU spec; ``recorded-steps``: every step lasts what the
real server's steps lasted at that moment, read off the run's own records
(``calibrate/step_times.py``, ``simulator/costmodel/recorded.py``): its errors are the
scheduler's alone. The same replay prices each of its steps with the headline too (never
used for time): each request's decode time priced so over its real decode window is the
``decode_given_concurrency`` row, the step cost's error alone on the replayed batches. The mixture-of-experts run (Qwen3-30B-A3B)
is not replayed: pagesim does not model experts (said on the page). Every run is
``held_out``: nothing is fitted on them.

A serving path fitted on each run's first half (``vllm019_serving_protocol.md``, written
before any fit): on the recorded-steps replay's batches of the run's first half of
requests by arrival (:mod:`pagesim.calibrate.serving_v1`), the second half held out; the
run replayed closed loop under the headline plus that serving path (cost model
:data:`SERVED`, not the headline), its rows split into the run's two halves (``<run>
(first half)``, role ``fit``; ``<run> (second half)``, role ``held_out``). And each RTX PRO
6000 run replayed under the serving path fitted on the other model's run (cost model
:data:`OTHER`, role ``held_out``; addendum 3), and each Llama-3.1-8B run under the path
fitted on the same model's run on the other GPU (:data:`OTHER_GPU`, role ``held_out``;
addendum 4).

Post hoc (``vllm019_link_protocol.md``, written after all of the above had been seen): each
TP > 1 run replayed with ``hardware.link`` set to the link figures of LLMServingSim's own
config of the run (``config.json``: ``link_bw``, ``link_latency``; read from the data, not
copied), on the headline (:data:`PEER_LINK`) and on addendum 3's transfer
(:data:`OTHER_PEER_LINK`); role ``post_hoc``, never the headline.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from pagesim.errors import DataError
from pagesim.experiments.validation import vcsv
from pagesim.experiments.validation.compare import Goal, run_ids, within_goal
from pagesim.experiments.validation.report import pct
from pagesim.experiments.validation.study import CostModelChoice, Study, ValidationRun

NAME = "llmservingsim_vllm019"
TITLE = "vLLM 0.19 (V1) runs from LLMServingSim (ShareGPT, 300 requests at ~10 req/s)"
COMMAND = "pagesim validate-vllm --data DATA/llmservingsim_vllm019 --out OUT --docs docs/validation_vllm019.md"
#: the data's folder names -> pagesim's GPU specs
GPUS = {"RTX4090": "rtx-4090", "RTXPRO6000": "rtx-pro-6000-server"}
#: the engine's model names -> pagesim's model specs (None: not modelled, and why)
MODELS = {
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": None,
}
NOT_MODELLED = "a mixture-of-experts model (expert routing and expert parallelism are not modelled)"
GOAL_LATENCY = 0.05
#: how the intervals are made (module docstring)
INTERVALS = SimpleNamespace(nominal=0.9, replicates=40, sources=["cost"], seed=0)
GOAL_BLOCKS_POINTS = 5.0
#: the cost model whose steps last what the real run's did (module docstring)
RECORDED = vcsv.RECORDED_STEPS
#: the headline plus a serving path fitted on the run's first half (module docstring)
SERVED = "kernels+serving-half"
#: the headline's profiles as they were before their mixed-step term
ADDITIVE = "kernels-additive"
#: the headline replayed with vLLM's async scheduling (async_scheduling_protocol.md)
ASYNC = "kernels+async"
HALVES = (("first half", "fit"), ("second half", "held_out"))
#: the sources of spread of its intervals (vllm019_serving_protocol.md, addendum 2)
SERVED_SOURCES = ("cost", "serving")
#: the headline plus the serving path fitted on another run of the same GPU (addendum 3)
OTHER = "kernels+serving-other-model"
#: the headline plus the serving path fitted on the same model's run on another GPU (addendum 4)
OTHER_GPU = "kernels+serving-other-gpu"
#: post hoc: the headline with the peer's link figures at TP > 1 (vllm019_link_protocol.md)
PEER_LINK = "kernels+peer-link"
#: post hoc: addendum 3's transfer with the same link (vllm019_link_protocol.md)
OTHER_PEER_LINK = "kernels+serving-other-model+peer-link"


def recognise(folder: Path) -> bool:
    return (folder / "workloads").is_dir() and any(folder.glob("*/*/vllm/requests.jsonl"))


def _profile_name(gpu: str, model: str, tp: int) -> str:
    return f"{gpu}-{model}{f'-tp{tp}' if tp > 1 else ''}-llmservingsim"


def read_runs(folder: Path) -> tuple[list[ValidationRun], list[str]]:
    """The dense runs ready to replay, and a line for each run that is not."""
    from pagesim.records.llmservingsim import read_llmservingsim_run, replay_trace
    from pagesim.simulator.memory import vllm_v1_pool
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    runs, skipped = [], []
    for run_dir in sorted(folder.glob("*/*/vllm")):
        gpu_dir, model_dir = run_dir.parent.parent.name, run_dir.parent.name
        run = read_llmservingsim_run(run_dir, NAME)
        meta = run.meta
        engine = meta.get("engine_kwargs", {})
        name = f"{gpu_dir}/{model_dir}"
        model = MODELS.get(meta.get("model", ""), "")
        if model is None:
            skipped.append(f"{name}: not replayed, {NOT_MODELLED}")
            continue
        if gpu_dir not in GPUS or not model:
            skipped.append(f"{name}: not replayed, GPU or model unknown to pagesim")
            continue
        tp = int(engine.get("tensor_parallel_size", 1) or 1)
        block = int(meta.get("kv_cache", {}).get("block_size", 16) or 16)
        seqs = int(engine.get("max_num_seqs", 256) or 256)
        budget = int(engine.get("max_num_batched_tokens", 2048) or 2048)
        util = float(meta.get("kv_cache", {}).get("gpu_memory_utilization", 0.9) or 0.9)
        blocks = meta.get("kv_cache", {}).get("num_gpu_blocks")
        pool_note = f"the engine's num_gpu_blocks ({blocks:,})" if blocks else ""
        model_pool = vllm_v1_pool(
            get_model(model),
            get_gpu(GPUS[gpu_dir]),
            tensor_parallel=tp,
            gpu_memory_utilization=util,
            max_num_batched_tokens=budget,
            max_num_seqs=seqs,
            block_size=block,
            total_memory_bytes=meta.get("hardware", {}).get("device_total_memory_bytes"),
        )
        if not blocks:
            blocks = model_pool.num_gpu_blocks
            pool_note = (
                f"V1's memory model ({blocks:,} blocks; the run did not record the engine's)"
            )
        dataset_path = meta.get("dataset_path")
        if not dataset_path or not (folder / dataset_path).is_file():
            raise DataError(f"{run_dir}: its workload file {dataset_path!r} is not in {folder}")
        settings = {
            "hardware": {
                "model": model,
                "gpu": GPUS[gpu_dir],
                "tensor_parallel": tp,
                "kv_slots": int(blocks) * block,
            },
            "allocator": {"kind": "paged-v1", "block_size": block, "prefix_caching": True},
            "scheduler": {
                "kind": "vllm-v1",
                "max_num_seqs": seqs,
                "max_num_batched_tokens": budget,
            },
            "max_model_len": int(engine.get("max_model_len") or 1 << 17),
        }
        info = {"model_pool": model_pool, "profile": _profile_name(GPUS[gpu_dir], model, tp)}
        link = peer_link(run_dir.parent / "config.json")
        if link is not None:
            info["peer_link"] = link
        runs.append(
            ValidationRun(
                run=run,
                launch="as recorded",
                role="held_out",
                settings=settings,
                evidence=f"pool: {pool_note}",
                trace=replay_trace(run, folder / dataset_path),
                info=info,
            )
        )
    if not runs:
        raise DataError(f"--data {folder}: no run pagesim can replay ({'; '.join(skipped)})")
    return runs, skipped


def peer_link(path: Path) -> dict | None:
    """The link of LLMServingSim's cluster config of a run (``link_bw`` in GB/s,
    ``link_latency`` in ns) as ``hardware.link``, or None where the file or a key is absent
    (``vllm019_link_protocol.md``: pagesim's ring formula with the peer's two numbers)."""
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not JSON ({e})") from e
    bw, latency = doc.get("link_bw"), doc.get("link_latency")
    if bw is None or latency is None:
        return None
    return {
        "bus_bw_gbps": float(bw),
        "latency_us": float(latency) / 1e3,
        "source": f"LLMServingSim's config of this run, link_bw {bw:g} GB/s and link_latency "
        f"{latency:g} ns",
    }


def _link_overrides(vruns: list[ValidationRun]) -> dict[str, dict]:
    """Per TP > 1 run with the peer's link figures: its ``hardware.link``."""
    return {
        v.name: {"link": v.info["peer_link"]}
        for v in vruns
        if v.settings["hardware"]["tensor_parallel"] > 1 and "peer_link" in v.info
    }


def prepare(folder: Path, out_dir: Path) -> Study:
    vruns, skipped = read_runs(Path(folder))
    links = _link_overrides(vruns)
    # each run's own GPU and model have their own imported profile
    study = Study(
        dataset=NAME,
        title=TITLE,
        runs=vruns,
        cost_models=[
            CostModelChoice("analytic", None, note="the GPU spec's roofline, nothing fitted"),
            CostModelChoice(
                "kernels",
                vruns[0].info["profile"],
                headline=True,
                per_run={v.name: v.info["profile"] for v in vruns},
                note="the profile imported from the same vLLM's layer timings on the run's GPU "
                "(`calibrate import --llmservingsim`); nothing fitted on these runs",
            ),
            CostModelChoice(
                ADDITIVE,
                None,
                make=_additive_model,
                note="the headline's profile without its mixed_decode_attention term (a mixed "
                "step's attention priced as its prefill part plus its decode part, as the "
                "profiles were before `experiments/validation/vllm019_mixed_protocol.md`); "
                "nothing fitted on these runs",
            ),
            CostModelChoice(
                ASYNC,
                vruns[0].info["profile"],
                per_run={v.name: v.info["profile"] for v in vruns},
                post_hoc=True,
                scheduler={"async_scheduling": True},
                note="POST HOC: the headline with vLLM's async scheduling, which v0.19.0 runs by "
                "default (scheduler rule 6; `experiments/validation/async_scheduling_protocol.md`, "
                "written after the H100 page's TTFTs had been seen); never the headline, not "
                "scored",
            ),
            *(
                [
                    CostModelChoice(
                        PEER_LINK,
                        vruns[0].info["profile"],
                        per_run={v.name: v.info["profile"] for v in vruns},
                        runs=frozenset(links),
                        post_hoc=True,
                        hardware=links,
                        note="POST HOC: the headline with the TP all-reduces over the link of "
                        "LLMServingSim's own config of the run (`hardware.link`; "
                        "`experiments/validation/vllm019_link_protocol.md`, written after "
                        "every replay above had been seen); TP > 1 runs only; never the "
                        "headline, not scored",
                    )
                ]
                if links
                else []
            ),
            CostModelChoice(
                RECORDED,
                None,
                make=_recorded_steps,
                note="each step lasts what the real server's steps lasted at that moment, read "
                "off the run's own records (`calibrate/step_times.py`): the scheduler's error "
                "alone; not a prediction",
            ),
        ],
        command=COMMAND,
        extra={"skipped": skipped, "out_dir": Path(out_dir)},
        intervals=INTERVALS,
    )
    return study


def _headline_model(vrun: ValidationRun, without_terms: tuple[str, ...] = ()):
    """The run's headline cost model (its GPU's and model's imported profile), less
    ``without_terms``."""
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    hw = vrun.settings["hardware"]
    return cost_model_for(
        vrun.info["profile"],
        get_model(hw["model"]),
        get_gpu(hw["gpu"]),
        tensor_parallel=hw["tensor_parallel"],
        without_terms=without_terms,
    )


def _additive_model(vrun: ValidationRun):
    """The headline without its mixed-step term (``kernels-additive``)."""
    return _headline_model(vrun, ("mixed_decode_attention",))


def _recorded_steps(vrun: ValidationRun):
    """The run's recorded step times as a cost model, the headline pricing each step beside."""
    from pagesim.calibrate.step_times import recorded_costs

    return recorded_costs(vrun.run, shadow=_headline_model(vrun))


def _recorded(replays: dict) -> dict:
    """Run -> its recorded-steps replay's cost model (its step times and step log)."""
    return {run: rep.cost_model for (run, cost), rep in replays.items() if cost == RECORDED}


def open_loop_rows(study: Study, replays: dict) -> list[dict]:
    """Per run: each request's decode time priced by the headline on the batches of the
    recorded-steps replay (``calibrate.step_times.priced_decode_times``): the step cost's
    error alone."""
    from pagesim.calibrate.step_times import priced_decode_times

    recorded = _recorded(replays)
    rows: list[dict] = []
    for v in study.runs:
        if v.name not in recorded:
            continue
        predicted, measured = priced_decode_times(v.run, recorded[v.name].log)
        rows += vcsv.rows(
            **run_ids(study, v),
            cost_model=study.headline.name,
            headline=True,
            metric="decode_given_concurrency",
            predicted_s=predicted,
            measured_s=measured,
        )
    return rows + serving_half_rows(study, replays)


def _half_name(run: str, half: str) -> str:
    return f"{run} ({half})"


def serving_half_rows(study: Study, replays: dict) -> list[dict]:
    """Per run: the serving path fitted on its first half's decodes over the recorded-steps
    replay's batches, the decode-time errors of both halves before and after, the run
    replayed closed loop under the headline plus it, rows per half, and their intervals
    (module docstring; ``vllm019_serving_protocol.md``)."""
    from pagesim.calibrate.serving_v1 import all_coefficients, decode_errors, fit_serving_v1
    from pagesim.experiments.validation.replay import replay
    from pagesim.simulator.costmodel.factory import resolve_profile
    from pagesim.simulator.model_gpu_specs import get_gpu

    recorded = _recorded(replays)
    fits, rows, choices = {}, [], {}
    folder = study.extra.get("out_dir", Path(".")) / "serving-half"
    for v in study.runs:
        if v.name not in recorded:
            continue
        half = v.run.num_requests // 2
        fit, w = fit_serving_v1(v.run, recorded[v.name].log, fit_rows=np.arange(half))
        coefs = all_coefficients(fit.chosen)
        masks = {"first half": w.row < half, "second half": w.row >= half}
        errors = {
            h: (decode_errors(w, {}, m), decode_errors(w, coefs, m)) for h, m in masks.items()
        }
        path = fit.serving_path(
            origin=f"fitted on {v.name}'s first half (vllm019_serving_protocol.md)"
        )
        profile = resolve_profile(v.info["profile"], get_gpu(v.settings["hardware"]["gpu"]))
        saved = profile.with_terms(serving=path).save(
            folder / v.name.replace("/", "-") / "profile.yaml"
        )
        choices[v.name] = CostModelChoice(SERVED, str(saved))
        rep = replay(v, choices[v.name])
        for label, role, pred, meas in _halves(v, rep.requests, half):
            ids = {**run_ids(study, v), "run": _half_name(v.name, label), "role": role}
            rows += vcsv.latency_rows(pred, meas, **ids, cost_model=SERVED, headline=False)
        fits[v.name] = {"fit": fit, "errors": errors, "half": half, "path": path}
    study.extra["serving_half"] = fits
    if study.intervals is not None and choices:
        rows = _served_intervals(study, choices, rows)
    return rows + _transfer_rows(study, fits, folder)


#: the serving-path transfer tables on the page (addenda 3 and 4): the study's extra key of
#: each run's partner, the cost model, the text before the table and after it
TRANSFER_TABLES = (
    (
        "serving_other",
        OTHER,
        "Does a serving path move to another model on the same server (the protocol's "
        "addendum 3, decided before any such replay)? Each RTX PRO 6000 run replayed closed "
        "loop, every request, under its own headline profile plus the serving path fitted "
        f"on the other run's first half (`{OTHER}`, role held_out):",
        "A serving path fitted so carries what the kernel profile misses for that model "
        "and TP degree, not only the server's own cost per step: set each row beside the "
        "run's own first-half fit above before using one model's fit for another.",
    ),
    (
        "serving_other_gpu",
        OTHER_GPU,
        "Does a serving path move to another GPU for the same model (the protocol's "
        "addendum 4, decided before any such replay)? Each Llama-3.1-8B run replayed "
        "closed loop, every request, under its own headline profile plus the serving path "
        f"fitted on the other GPU's run's first half (`{OTHER_GPU}`, role held_out):",
        "",
    ),
)


def _transfer_lines(
    table: pd.DataFrame,
    fits: dict,
    partners: dict[str, str],
    cost_model: str,
    intro: str,
    outro: str = "",
) -> list[str]:
    """A transfer's table (addenda 3 and 4): each run's errors under the serving path
    fitted on its partner's first half; nothing when no run has a partner."""
    if not partners:
        return []
    lines = [
        "",
        intro,
        "",
        "| run | serving path fitted on | TTFT p50 | TPOT p50 | E2E p50 | TTFT mean | TPOT mean "
        "| E2E mean |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, other in partners.items():
        cells = _p50_mean_cells(table, run, cost_model)
        lines.append(
            f"| {run} | {other} (requests 1-{fits[other]['half']}) | " + " | ".join(cells) + " |"
        )
    return lines + (["", outro] if outro else [])


def _same_gpu(v: ValidationRun, u: ValidationRun) -> bool:
    """Addendum 3's partners: the same GPU (another model)."""
    return v.settings["hardware"]["gpu"] == u.settings["hardware"]["gpu"]


def _same_model_other_gpu(v: ValidationRun, u: ValidationRun) -> bool:
    """Addendum 4's partners: the same model and TP degree on another GPU."""
    a, b = v.settings["hardware"], u.settings["hardware"]
    return (
        a["gpu"] != b["gpu"]
        and a["model"] == b["model"]
        and a["tensor_parallel"] == b["tensor_parallel"]
    )


#: the transfers of a fitted serving path to another run: cost model, partner rule, the
#: study.extra key of its pairs (addenda 3 and 4 of vllm019_serving_protocol.md)
TRANSFERS = (
    (OTHER, _same_gpu, "serving_other"),
    (OTHER_GPU, _same_model_other_gpu, "serving_other_gpu"),
)


def _transfer_rows(study: Study, fits: dict, folder: Path) -> list[dict]:
    """Each run with exactly one partner under a transfer's rule replayed under its own
    headline profile plus the serving path fitted on that partner's first half (role
    held_out: nothing of the run replayed was fitted)."""
    from pagesim.experiments.validation.replay import replay
    from pagesim.simulator.costmodel.factory import resolve_profile
    from pagesim.simulator.model_gpu_specs import get_gpu

    rows: list[dict] = []
    for cost_model, rule, key in TRANSFERS:
        partners: dict[str, str] = {}
        for v in study.runs:
            same = [u for u in study.runs if u is not v and rule(v, u)]
            if len(same) != 1 or same[0].name not in fits or v.name not in fits:
                continue
            other = same[0].name
            gpu = v.settings["hardware"]["gpu"]
            profile = resolve_profile(v.info["profile"], get_gpu(gpu))
            saved = profile.with_terms(serving=fits[other]["path"]).save(
                folder
                / f"{v.name.replace('/', '-')}-serving-of-{other.replace('/', '-')}"
                / "profile.yaml"
            )
            rep = replay(v, CostModelChoice(cost_model, str(saved)))
            rows += vcsv.latency_rows(
                rep.requests,
                v.run.latencies(),
                **{**run_ids(study, v), "role": "held_out"},
                cost_model=cost_model,
                headline=False,
            )
            partners[v.name] = other
            if cost_model == OTHER:
                rows += _other_peer_link_rows(study, v, saved)
        study.extra[key] = partners
    return rows


def _other_peer_link_rows(study: Study, vrun: ValidationRun, saved: Path) -> list[dict]:
    """Post hoc (``vllm019_link_protocol.md``): addendum 3's transfer replayed with the peer's
    link, for a TP > 1 run that has it."""
    from pagesim.experiments.validation.replay import replay

    link = _link_overrides([vrun])
    if not link:
        return []
    choice = CostModelChoice(OTHER_PEER_LINK, str(saved), post_hoc=True, hardware=link)
    rep = replay(vrun, choice)
    return vcsv.latency_rows(
        rep.requests,
        vrun.run.latencies(),
        **{**run_ids(study, vrun), "role": choice.role(vrun)},
        cost_model=OTHER_PEER_LINK,
        headline=False,
    )


def _halves(vrun: ValidationRun, requests: pd.DataFrame, half: int):
    """(label, role, predicted, measured) per half of ``vrun``'s requests in the records'
    order (the replay's must be the records' in order)."""
    from pagesim.experiments.validation.intervals import _aligned

    req = requests.sort_values("request_id")
    if not _aligned(vrun, req):
        raise DataError(f"{vrun.name}: the replay's requests are not the records' in order")
    meas = vrun.run.latencies()
    first = np.arange(vrun.run.num_requests) < half
    for (label, role), sel in zip(HALVES, (first, ~first), strict=True):
        yield label, role, req[sel], meas[sel]


def _served_intervals(study: Study, choices: dict, rows: list[dict]) -> list[dict]:
    """The intervals of the fitted serving path's rows (the protocol's addendum 2): raw
    intervals from replicates drawing ``cost`` and ``serving``, the conformal factor fitted
    on the first halves' statistics, the second halves' coverage held out."""
    from dataclasses import replace

    from pagesim.experiments.validation.intervals import conformal_factor, replicate_table

    cfg = study.intervals
    lo_q, hi_q = (1 - cfg.nominal) / 2, 1 - (1 - cfg.nominal) / 2
    raw: dict[tuple[str, str, str], tuple[float, float]] = {}
    for v in study.runs:
        if v.name not in choices:
            continue
        # the replicates of the headline's intervals, of this run under this cost model:
        # each request's value per replicate, in the records' order
        per_request: dict = {}
        one = replace(study, runs=[v], cost_models=[replace(choices[v.name], headline=True)])
        replicate_table(
            one, cfg.nominal, cfg.replicates, list(SERVED_SOURCES), cfg.seed, per_request
        )
        first = np.arange(v.run.num_requests) < study.extra["serving_half"][v.name]["half"]
        for (label, _), sel in zip(HALVES, (first, ~first), strict=True):
            for metric in vcsv.METRICS:
                values = per_request[(v.name, metric)][:, sel]
                for stat in vcsv.STATS:
                    vs = [vcsv.statistic(x, stat) * 1e3 for x in values]
                    raw[(_half_name(v.name, label), metric, stat)] = (
                        float(np.quantile(vs, lo_q)),
                        float(np.quantile(vs, hi_q)),
                    )

    def score(row) -> float:
        lo, hi = raw[(row["run"], row["metric"], row["stat"])]
        return abs(row["measured_ms"] - (lo + hi) / 2) / max((hi - lo) / 2, 1e-12)

    factor = conformal_factor(np.array([score(r) for r in rows if r["role"] == "fit"]), cfg.nominal)
    out = []
    for r in rows:
        lo, hi = raw[(r["run"], r["metric"], r["stat"])]
        c, h = (lo + hi) / 2, (hi - lo) / 2
        r = {**r, "lo_ms": c - factor * h, "hi_ms": c + factor * h}
        r["covered"] = bool(r["lo_ms"] <= r["measured_ms"] <= r["hi_ms"])
        r["raw_covered"] = bool(lo <= r["measured_ms"] <= hi)
        r["raw_width"] = (hi - lo) / r["measured_ms"]
        out.append(r)
    study.extra["serving_half_intervals"] = {"factor": factor, "rows": out}
    return [{k: v for k, v in r.items() if k not in ("raw_covered", "raw_width")} for r in out]


def _serving_half_lines(study: Study, table: pd.DataFrame) -> list[str]:
    """The page's section on the serving path fitted on each run's first half."""
    from pagesim.calibrate.serving_v1 import form_lines

    fits = study.extra.get("serving_half", {})
    if not fits:
        return []
    lines = [
        "",
        "## A serving path fitted on each run's first half",
        "",
        "Decided before any fit (`experiments/validation/vllm019_serving_protocol.md`): each "
        "run's serving path (a cost per step, per sequence, per context token and per prompt "
        "token computed, on top of the headline's kernels; `simulator/costmodel/serving.py`) "
        "fitted on its first half of requests by arrival, the second half held out. Each "
        "request's decode time given the batches of the run's `recorded-steps` replay is its "
        "output − 1 times the mean, over the replay's steps in its real decode window, of "
        "(kernel price + serving); DistServe's forms, each with the prompt-token term, by "
        "nonnegative least squares on relative errors; the form chosen by two-fold "
        "cross-validation on the first half (`calibrate/serving_v1.py`). No front-end delay: "
        "these TTFTs count from the engine's queue. The headline stays `kernels`: nothing in "
        "the goals is fitted.",
    ]
    for run, f in fits.items():
        fit = f["fit"]
        lines += [
            "",
            f"**{run}**, fitted on requests 1-{f['half']} (chosen: **{fit.chosen.form}**):",
            "",
            *form_lines(fit),
        ]
    lines += [
        "",
        "Decode time given the replayed batches (predicted / measured − 1, mean and p50), "
        "kernels alone and with the fitted serving path, and the run replayed closed loop "
        f"under both (`{SERVED}`), per half:",
        "",
        "| run | half | role | requests | decode mean: kernels | + serving | decode p50: "
        "kernels | + serving | closed loop TTFT p50 | TPOT p50 | E2E p50 | TTFT mean | "
        "TPOT mean | E2E mean |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run, f in fits.items():
        for label, role in HALVES:
            before, after = f["errors"][label]
            name = _half_name(run, label)
            loop = _p50_mean_cells(table, name, SERVED)
            lines.append(
                f"| {run} | {label} | {role} | {before['requests']} | {pct(before['mean'])} | "
                f"{pct(after['mean'])} | {pct(before['p50'])} | {pct(after['p50'])} | "
                + " | ".join(loop)
                + " |"
            )
    lines += [
        "",
        "The second half's closed-loop errors are predictions for requests nothing was fitted "
        "on, but of a run whose first half was: not a held-out server. The serving path "
        "absorbs whatever the kernel profile misses on that server (the mixed steps' "
        "attention, the TP all-reduce), not only host work.",
    ]
    for key, cost_model, intro, outro in TRANSFER_TABLES:
        lines += _transfer_lines(table, fits, study.extra.get(key, {}), cost_model, intro, outro)
    cov = study.extra.get("serving_half_intervals")
    if cov:
        cfg = study.intervals
        frame = pd.DataFrame(cov["rows"])
        lines += [
            "",
            f"Intervals ({cfg.nominal:.0%}; the protocol's addendum 2, decided before any was "
            f"computed): each run replayed {cfg.replicates} times under the headline plus its "
            "fitted serving path, each replicate one draw of the sources "
            f"{', '.join(SERVED_SOURCES)} (one multiplier per kernel term from its held-out "
            "residuals, one on the serving path from its fit residuals); the raw interval is "
            "the replicates' central range, widened by the conformal factor fitted on the "
            f"first halves' statistics (**{cov['factor']:.2f}**); the second halves' coverage "
            "is held out. Width: the mean of (hi − lo) / measured.",
            "",
            "| half | role | statistics | raw coverage | raw width | coverage | width |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, role in HALVES:
            sub = frame[frame["role"] == role]
            width = ((sub["hi_ms"] - sub["lo_ms"]) / sub["measured_ms"]).mean()
            lines.append(
                f"| {label} | {role} | {len(sub)} | {sub['raw_covered'].mean():.0%} | "
                f"{sub['raw_width'].mean():.0%} | {sub['covered'].mean():.0%} | {width:.0%} |"
            )
    return lines


def _peer_link_lines(study: Study, table: pd.DataFrame) -> list[str]:
    """The post hoc link variants of the TP > 1 runs (``vllm019_link_protocol.md``)."""
    links = _link_overrides(study.runs)
    if not links:
        return []
    lines = [
        "",
        "## The TP 2 run over the peer's link (post hoc)",
        "",
        "Written after every replay above had been seen "
        "(`experiments/validation/vllm019_link_protocol.md`): a diagnostic, role `post_hoc`, "
        "not scored. The imported layer profiles were timed on one GPU, so a TP > 1 run's "
        "all-reduces are pagesim's ring formula over the GPU spec's link (PCIe on these "
        "GPUs). Here the same formula takes instead the two link figures of LLMServingSim's own "
        "config of the run (`hardware.link`): whether the peer measured them or chose them "
        "to fit the run it does not say. Each run replayed closed loop, every request:",
        "",
        "| run | cost model | all-reduce link | TTFT p50 | TPOT p50 | E2E p50 | TTFT mean "
        "| TPOT mean | E2E mean |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    spec_link = "the GPU spec's"
    for run, over in links.items():
        peer = f"{over['link']['bus_bw_gbps']:g} GB/s, {over['link']['latency_us']:g} µs"
        for cost, link in (
            (study.headline.name, spec_link),
            (PEER_LINK, peer),
            (OTHER, spec_link),
            (OTHER_PEER_LINK, peer),
        ):
            cells = _p50_mean_cells(table, run, cost)
            lines.append(f"| {run} | `{cost}` | {link} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"`{OTHER}` and `{OTHER_PEER_LINK}` add the serving path fitted on the first half of "
        "the Llama-3.1-8B run of the same GPU (its host time; addendum 3 of "
        "`vllm019_serving_protocol.md`). Neither variant is a held-out result: the link "
        "figures come from a simulator configured for this very run.",
    ]
    return lines


def _kv_series(vrun: ValidationRun, rep) -> pd.DataFrame:
    """The engine's 1 s series beside the replay's at the same times (both from the first
    arrival): requests running and waiting, and the KV pool in use (``real_pct`` NaN
    where the engine did not report it: a series of zeros)."""
    real = vrun.run.meta.get("timeseries")
    if real is None or len(real) == 0:
        return pd.DataFrame()
    ts = rep.timeseries
    used = 100.0 * (1.0 - ts["num_free_blocks"].to_numpy() / rep.kv_blocks)
    ends = (ts["t_s"] + ts["duration_s"]).to_numpy()
    t = real["t"].to_numpy(dtype=float)
    idx = np.clip(np.searchsorted(ends, t), 0, len(used) - 1)
    # after the replay's last step nothing runs or waits (its pool keeps its cached blocks)
    over = t > ends[-1]
    real_pct = real["kv_cache_pct"].to_numpy(dtype=float)
    if not (real_pct > 0).any():
        real_pct = np.full(len(t), np.nan)
    return pd.DataFrame(
        {
            "t": t,
            "real_pct": real_pct,
            "sim_pct": used[idx],
            "real_running": real["running"].to_numpy(dtype=float),
            "sim_running": np.where(over, 0.0, ts["num_running"].to_numpy(dtype=float)[idx]),
            "real_waiting": real["waiting"].to_numpy(dtype=float),
            "sim_waiting": np.where(over, 0.0, ts["num_waiting"].to_numpy(dtype=float)[idx]),
        }
    )


def _kv_recorded(s: pd.DataFrame) -> bool:
    return len(s) > 0 and bool(np.isfinite(s["real_pct"]).any())


def goals(study: Study, table: pd.DataFrame) -> list[Goal]:
    head = table[(table["cost_model"] == study.headline.name) & table["stat"].isin(["mean", "p50"])]
    out = []
    for metric in vcsv.METRICS:
        sub = head[head["metric"] == metric]
        out.append(
            within_goal(
                sub.assign(run=sub["run"] + " " + sub["stat"]),
                f"{metric.upper()} mean and p50 within ±{GOAL_LATENCY:.0%}, every dense run",
                GOAL_LATENCY,
            )
        )
    series = study.extra.get("kv_series", {})
    if series:
        gaps = {
            run: float(np.mean(np.abs(s["sim_pct"] - s["real_pct"])))
            for run, s in series.items()
            if _kv_recorded(s)
        }
        out.append(
            Goal(
                f"blocks in use within {GOAL_BLOCKS_POINTS:g} points of kv_cache_pct over the run "
                "(mean absolute difference; the runs that recorded it)",
                bool(gaps) and all(g <= GOAL_BLOCKS_POINTS for g in gaps.values()),
                ", ".join(f"{r} {g:.1f} points" for r, g in gaps.items()) or "no series recorded",
            )
        )
    return out


def sections(study: Study, table: pd.DataFrame, replays: dict) -> list[str]:
    study.extra["kv_series"] = {
        v.name: _kv_series(v, replays[(v.name, study.headline.name)]) for v in study.runs
    }
    # each run's headline replay, then its recorded-steps replay (the scheduler alone)
    shown = {}
    for v in study.runs:
        shown[f"{v.name}, {study.headline.name}"] = study.extra["kv_series"][v.name]
        if (v.name, RECORDED) in replays:
            shown[f"{v.name}, {RECORDED}"] = _kv_series(v, replays[(v.name, RECORDED)])
    study.extra["series_shown"] = shown
    lines = [
        "## The runs and their KV pools",
        "",
        "Records: LLMServingSim 2.0 (GitHub `casys-kaist/LLMServingSim`, commit 5daddb2), "
        "`<GPU>/<model>/vllm/` (not copied here: the command reads them from `--data`). TTFT "
        "counts from the engine's `queued_ts` (the client's and the engine's clocks cannot be "
        "subtracted), as LLMServingSim's own validation does.",
        "",
        "| run | model | GPU, TP | max_num_seqs | budget | pool replayed | V1 memory model |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in study.runs:
        hw, sch = v.settings["hardware"], v.settings["scheduler"]
        pool = v.info["model_pool"]
        lines.append(
            f"| {v.name} | {hw['model']} | {hw['gpu']}, {hw['tensor_parallel']} | "
            f"{sch['max_num_seqs']} | {sch['max_num_batched_tokens']} | "
            f"{hw['kv_slots'] // v.settings['allocator']['block_size']:,} blocks ({v.evidence.removeprefix('pool: ')}) | "
            f"{pool.num_gpu_blocks:,} blocks |"
        )
    for line in study.extra.get("skipped", []):
        lines.append(f"\nNot replayed: {line}.")
    lines += [
        "",
        "V1's memory model (`simulator/memory.py`, `vllm_v1_pool`: weights, the profiling "
        "pass's activation peak, no estimate of the non-torch memory) beside the engine's own "
        "count where the run recorded it: the model is an upper bound by what it leaves out.",
        "",
        "## Memory over time",
        "",
        "The replay's blocks in use (% of the pool) beside the engine's 1 s `kv_cache_pct`, "
        "both from the first arrival: mean absolute difference and the peaks; each run's "
        f"headline replay, and its replay under the run's own step times (`{RECORDED}`: the "
        "scheduler and the pool alone).",
        "",
        "| run, replay | mean abs. difference (points) | real peak | replay peak |",
        "|---|---|---|---|",
    ]
    for run, s in shown.items():
        if _kv_recorded(s):
            lines.append(
                f"| {run} | {np.mean(np.abs(s['sim_pct'] - s['real_pct'])):.1f} | "
                f"{s['real_pct'].max():.1f}% | {s['sim_pct'].max():.1f}% |"
            )
        else:
            lines.append(f"| {run} | not recorded (its kv_cache_pct is 0 throughout) | — | — |")
    lines += _queue_lines(shown)
    lines += _separation_lines(study, table, _recorded(replays))
    lines += _serving_half_lines(study, table)
    lines += _peer_link_lines(study, table)
    return lines


def _series_step_ratio(vrun: ValidationRun, steps) -> float:
    """Median over the engine's 1 s ticks with more than 5 running requests of the
    reconstruction's steps in the tick over the series' generated tokens per running
    request (a step gives each decoding request one token): an independent check of the
    step rate (NaN without a series)."""
    real = vrun.run.meta.get("timeseries")
    if real is None or "gen_throughput" not in real or not len(real):
        return float("nan")
    t = real["t"].to_numpy(dtype=float)
    running = real["running"].to_numpy(dtype=float)
    busy = running > 5
    if not busy.any():
        return float("nan")
    per_request = real["gen_throughput"].to_numpy(dtype=float)[busy] / running[busy]
    return float(np.median(steps.steps_between(t[busy] - 1.0, t[busy]) / per_request))


def _cell(table: pd.DataFrame, run: str, cost: str, metric: str, stat: str = "p50") -> str:
    sub = table[
        (table["run"] == run)
        & (table["cost_model"] == cost)
        & (table["metric"] == metric)
        & (table["stat"] == stat)
    ]
    return pct(float(sub["error"].iloc[0])) if len(sub) else "—"


def _p50_mean_cells(table: pd.DataFrame, run: str, cost: str) -> list[str]:
    """A row's TTFT, TPOT and E2E p50 errors, then their means."""
    return [_cell(table, run, cost, m, stat) for stat in ("p50", "mean") for m in vcsv.METRICS]


def _separation_lines(study: Study, table: pd.DataFrame, recorded: dict) -> list[str]:
    """The scheduler's error apart from the cost model's, per run."""
    from pagesim.calibrate.step_times import BIN_S, split_half_errors
    from pagesim.simulator.costmodel.model import ALLREDUCE_LATENCY_S
    from pagesim.simulator.model_gpu_specs import get_gpu

    head = study.headline.name
    lines = [
        "",
        "## The scheduler's error apart from the cost model's",
        "",
        f"**Scheduler alone** (`{RECORDED}`): the run replayed with every step lasting what "
        "the real server's steps lasted at that moment, whatever the batch. The step times "
        "are read off the records (`calibrate/step_times.py`): between its first token and "
        "its last, a request sat in output − 1 steps, so the step rate, constant within "
        f"{BIN_S:g} s bins, is fitted by least squares over every request's decode. What is "
        "left of the error is the scheduler's and the pool's (admission, chunking, "
        "preemption). **Cost model alone** (`decode_given_concurrency`): the same replay "
        f"prices each of its steps with the headline ({head}) too; each request's decode "
        "time priced so over its real decode window, beside the measured one.",
        "",
        "How far the step times can be trusted: the reconstruction fitted on half the "
        "requests predicts the other half's decode step counts (four random halvings; "
        "median and 90th percentile of the absolute error), and the engine's own 1 s "
        "series gives another count of steps per second (generated tokens per running "
        "request; median over the busy ticks of reconstruction / series). Both assume every "
        "step gives every decoding request a token: a preempted request sat in more steps "
        "than it has tokens, which makes the reconstructed steps too long. And a bin's step "
        "time is the mean of its steps, so a TTFT of a few steps without queueing would "
        "come out short; these runs' TTFTs are mostly queueing (seconds to minutes).",
        "",
        "| run | split-half error: median | p90 | steps vs series | scheduler alone: "
        "TTFT p50 | TPOT p50 | E2E p50 | cost alone: decode time p50 | headline: TTFT p50 "
        "| TPOT p50 | E2E p50 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in study.runs:
        errors = np.abs(split_half_errors(v.run))
        ratio = _series_step_ratio(v, recorded[v.name].step_times)
        cells = [
            f"{np.median(errors):.1%}",
            f"{np.percentile(errors, 90):.1%}",
            f"{ratio:.2f}" if np.isfinite(ratio) else "—",
            *(_cell(table, v.name, RECORDED, m) for m in vcsv.METRICS),
            _cell(table, v.name, head, "decode_given_concurrency"),
            *(_cell(table, v.name, head, m) for m in vcsv.METRICS),
        ]
        lines.append(f"| {v.name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Every step of the `{RECORDED}` replay, priced by the headline beside its recorded "
        "time (all steps together), and the part of that price that is the analytic "
        "tensor-parallel all-reduce (two a layer: `2 (TP − 1) / TP × bytes / link "
        f"bandwidth + {ALLREDUCE_LATENCY_S * 1e6:g} µs`, the link bandwidth from the GPU "
        "spec):",
        "",
        "| run | TP | link bandwidth | steps | recorded (s) | priced (s) | priced / recorded − 1 "
        "| all-reduce in the price (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in study.runs:
        if v.name not in recorded:
            continue
        log = recorded[v.name].log
        hw = v.settings["hardware"]
        took, priced = float(log[:, 1].sum()), float(np.nansum(log[:, 2]))
        tp = int(hw["tensor_parallel"])
        allreduce = f"{np.nansum(log[:, 3]):.1f}" if tp > 1 else "— (TP 1)"
        link = get_gpu(hw["gpu"]).nvlink_bw_bytes_s / 1e9
        lines.append(
            f"| {v.name} | {tp} | {link:g} GB/s | {len(log):,} | {took:.1f} | {priced:.1f} "
            f"| {pct(priced / took - 1)} | {allreduce} |"
        )
    lines += [
        "",
        "The imported profiles hold the kernels' time only (no host time; the served runs "
        "used CUDA graphs and torch.compile, the layer timings did not), and their TP "
        "all-reduce is analytic. The decodes of a mixed step are priced by the profiles' "
        "`mixed_decode_attention` term, fitted on the same layer tables' mixed calls "
        f"(`experiments/validation/vllm019_mixed_protocol.md`; {_mixed_term_note(study)}); "
        f"`{ADDITIVE}` is the headline without it.",
        "",
        f"Errors of the headline: {', '.join(f'{r} TTFT p50 {pct(e)}' for r, e in _ttft_p50(table, study))}.",
    ]
    return lines


def _mixed_term_note(study: Study) -> str:
    """Each headline profile's mixed-step term: its form and the held-out error of the
    whole mixed call, beside the additive sum's."""
    from pagesim.simulator.costmodel.factory import resolve_profile
    from pagesim.simulator.model_gpu_specs import get_gpu

    notes = []
    for v in study.runs:
        name = study.headline.profile_for(v.name)
        profile = resolve_profile(name, get_gpu(v.settings["hardware"]["gpu"]))
        term = profile.terms.get("mixed_decode_attention")
        if term is None:
            notes.append(f"{name}: none (the additive sum was kept)")
        else:
            notes.append(f"{name}: held-out MAPE of the whole mixed call {term.heldout_mape:.1%}")
    return "; ".join(notes) + "; the additive sums' are in each profile's report.md"


def _queue_lines(series: dict[str, pd.DataFrame]) -> list[str]:
    """The engine's 1 s counts of running and waiting requests beside the replay's."""
    lines = [
        "",
        "## Requests running and waiting over time",
        "",
        "The engine's 1 s `running` and `waiting` counts beside the replay's at the same "
        "times (from the first arrival): the mean of each over the series and the mean "
        "absolute difference. A replay whose steps are too fast drains its queue sooner: "
        "fewer waiting, and the run ends earlier than the series.",
        "",
        "| run, replay | ticks | running: real mean | replay mean | mean abs. difference "
        "| waiting: real mean | replay mean | mean abs. difference |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run, s in series.items():
        if not len(s):
            lines.append(f"| {run} | no series recorded | — | — | — | — | — | — |")
            continue
        cells = [f"{len(s)}"]
        for what in ("running", "waiting"):
            real, sim = s[f"real_{what}"], s[f"sim_{what}"]
            cells += [
                f"{real.mean():.1f}",
                f"{sim.mean():.1f}",
                f"{np.mean(np.abs(sim - real)):.1f}",
            ]
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    return lines


def _ttft_p50(table: pd.DataFrame, study: Study):
    sub = table[
        (table["cost_model"] == study.headline.name)
        & (table["metric"] == "ttft")
        & (table["stat"] == "p50")
    ]
    return list(zip(sub["run"], sub["error"], strict=True))
