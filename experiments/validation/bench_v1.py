"""``replay-vllm``'s V1 parts: the replay under the server's own step times
(``--scheduler-alone``) and the serving path fitted on its batches (``--fit-serving``),
as :mod:`.bench`'s module docstring describes them; kept apart so that each file holds one
concept."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.errors import ConfigError
from pagesim.experiments.validation.bench import DATASET


def fit_command(path, desc, server_args, overrides, server, fraction) -> str:
    """The command a fitted profile records (the result's file name, not its path)."""
    argv = ["pagesim", "replay-vllm", Path(path).name, "--model", desc.model, "--gpu", desc.gpu]
    profile = desc.profile
    if profile:
        argv += [
            "--profile",
            Path(profile).name if profile.endswith((".yaml", ".yml")) else profile,
        ]
    argv += ["--vllm-version", desc.version] if desc.version else ["--scheduler", "vllm-v1"]
    if server_args:
        argv += ["--server-args", server_args]
    for key, value in (overrides or {}).items():
        argv += ["--set", f"{key}={value}"]
    if server != "a vLLM V1 server":
        argv += ["--server", server]
    if fraction != 1.0:
        argv += ["--fit-fraction", f"{fraction:g}"]
    return shlex.join(argv) + " --scheduler-alone --fit-serving DIR --out OUT"


def fit_serving_v1(
    run,
    log,
    spec,
    out: Path,
    *,
    profile,
    gpu,
    server,
    command,
    fraction: float = 1.0,
    ids: dict | None = None,
    cost_name: str = "analytic",
) -> tuple[dict[str, Path], list[dict]]:
    """The V1 serving fit on the recorded-steps replay (``--fit-serving``, module
    docstring), on the first ``fraction`` of the requests by send time (the rest held
    out): DIR/profile.yaml and DIR/report.md written; with a held-out part, the run
    replayed closed loop under the fitted profile, its validation.csv rows per part."""
    from pagesim.calibrate.serving import serving_profile
    from pagesim.calibrate.serving_checks import all_zero, zero_fit_lines
    from pagesim.calibrate.serving_v1 import (
        all_coefficients,
        decode_errors,
        describe_rows,
        fit_serving_v1_timed,
        form_lines,
    )
    from pagesim.files import atomic_write_text
    from pagesim.simulator import simulate
    from pagesim.simulator.costmodel.factory import make_cost_model, resolve_profile
    from pagesim.simulator.costmodel.serving import ServingCostModel
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    if resolve_profile(profile, get_gpu(gpu)).serving is not None:
        raise ConfigError(
            f"--fit-serving: --profile {profile} already has a serving section; fit on a "
            "kernel profile (one without)"
        )
    fit_rows = _fit_rows(run, fraction)
    partial = len(fit_rows) < run.num_requests
    kernels = make_cost_model(spec.hardware, get_model(spec.hardware.model), get_gpu(gpu))

    def replay_ttft(path) -> np.ndarray:
        req = simulate(spec, trace=run.trace(), cost_model=ServingCostModel(kernels, path)).requests
        return req.sort_values("request_id")["ttft_s"].to_numpy(dtype=float)

    held = np.ones(run.num_requests, dtype=bool)
    held[fit_rows] = False
    measured_ttft = run.latencies()["ttft_s"].to_numpy(dtype=float)
    fit, (w,), delay = fit_serving_v1_timed(
        [(run, log, fit_rows if partial else None)],
        replay_ttft,
        np.where(held, np.nan, measured_ttft),  # the delay from the fit requests only
    )
    fitted = serving_profile(
        fit,
        profile,
        gpu,
        command=command,
        server=server,
        origin=(
            f"fitted by `pagesim replay-vllm --scheduler-alone --fit-serving` on {server}'s "
            "`vllm bench serve` result: each request's decode time given the batches of the "
            "run replayed under its own step times (calibrate/serving_v1.py); form "
            f"{fit.chosen.form} chosen by two-fold cross-validation (forms tried: "
            f"{', '.join(f.form for f in fit.fits)}); front-end delay: where the run replayed "
            "under the kernels plus the fitted step cost has the measured median TTFT of the "
            "requests that queued least; it also absorbs what the kernel profile misses on "
            "that server"
        ),
    )
    out.mkdir(parents=True, exist_ok=True)
    written = {"profile": fitted.save(out / "profile.yaml")}
    coefs = all_coefficients(fit.chosen)
    fitted_mask = np.isin(w.row, fit_rows)
    groups = [("fitted", fitted_mask)]
    if partial:
        groups.append(("held out", ~fitted_mask))
    table = [
        "| requests | count | kernels alone: mean | p50 | + serving path: mean | p50 |",
        "|---|---|---|---|---|---|",
    ]
    for label, mask in groups:
        if not mask.any():
            continue
        b, a = decode_errors(w, {}, mask), decode_errors(w, coefs, mask)
        table.append(
            f"| {label} | {b['requests']} | {b['mean']:+.1%} | {b['p50']:+.1%} | "
            f"{a['mean']:+.1%} | {a['p50']:+.1%} |"
        )
    trust = _trust_line(run)
    if all_zero({**coefs, "frontend_delay_s": delay}):
        ttft = replay_ttft(fit.serving_path())  # all 0: the kernels alone
        ttft_error = np.nanmean(ttft[fit_rows]) / np.nanmean(measured_ttft[fit_rows]) - 1
        table += zero_fit_lines(decode_error=decode_errors(w, {}, fitted_mask)["mean"],
                                ttft_error=ttft_error, gpu=gpu, model=spec.hardware.model)  # fmt: skip
    rows: list[dict] = []
    loop_lines: list[str] = []
    if partial:
        from pagesim.experiments.validation import vcsv

        served = f"{cost_name}+serving-fit"
        req = simulate(
            spec, trace=run.trace(), cost_model=ServingCostModel(kernels, fitted.serving)
        ).requests.sort_values("request_id")
        measured = run.latencies()
        loop_lines = [
            "",
            f"The run replayed closed loop under the fitted profile (`{served}` in "
            "validation.csv), each part's statistics (predicted / measured − 1):",
            "",
            "| requests | role | TTFT p50 | TPOT p50 | E2E p50 | TTFT mean | TPOT mean | E2E mean |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for label, role, mask in (("fitted", "fit", ~held), ("held out", "held_out", held)):
            part = vcsv.latency_rows(
                req[mask],
                measured[mask],
                **(ids or {}),
                run=f"{run.name} ({label} requests)",
                role=role,
                cost_model=served,
                headline=False,
            )
            rows += part
            e = {(r["metric"], r["stat"]): r["error"] for r in part}
            cells = [f"{e[(m, st)]:+.1%}" for st in ("p50", "mean") for m in vcsv.METRICS]
            loop_lines.append(f"| {label} | {role} | " + " | ".join(cells) + " |")
    lines = [
        "# Serving path fit (vLLM V1)",
        "",
        f"Fitted on: {fit.fitted_on} ({int(fitted_mask.sum())} requests whose decode the "
        f"replay covers). Chosen form: **{fit.chosen.form}**; front-end delay "
        f"{delay * 1e3:.2f} ms (`calibrate/serving_v1.py`). {trust}",
        "",
        *form_lines(fit),
        "",
        f"Decode time given the replayed batches (predicted / measured − 1; kernels: "
        f"{profile or 'analytic'}):",
        "",
        *table,
        "",
        (
            f"Held out: requests {describe_rows(np.flatnonzero(held))} (the last "
            f"{1 - fraction:.0%} by send time), nothing fitted on them."
            if partial
            else "These are errors on the requests fitted: replay another run with the "
            "profile to check it (or fit on part of this one, `--fit-fraction`)."
        ),
        *loop_lines,
    ]
    written["report"] = atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    return written, rows


def _fit_rows(run, fraction: float) -> np.ndarray:
    """The rows ``--fit-serving`` fits on: the first ``fraction`` by send time."""
    order = np.argsort(run.table["arrival_s"].to_numpy(dtype=float), kind="stable")
    return np.sort(order[: max(1, int(np.ceil(fraction * run.num_requests)))])


def check_fit_data(run, fraction: float) -> None:
    """``--fit-serving`` on requests that cannot fit a serving path: refused before any
    replay (calibrate/serving_checks.py)."""
    from pagesim.calibrate.serving_checks import check_fit_records

    rows = _fit_rows(run, fraction)
    check_fit_records(
        f"{run.name} (the requests fitted)",
        run.table["prompt_len"].to_numpy()[rows],
        run.table["output_len"].to_numpy()[rows],
    )


def _trust_line(run) -> str:
    """How far the step times read off ``run`` hold each request's output - 1."""
    from pagesim.calibrate.step_times import step_count_errors

    steps = np.abs(step_count_errors(run, _step_times(run)))
    return (
        f"The step times hold each request's output − 1 within {np.median(steps):.1%} at the "
        f"median and {np.percentile(steps, 90):.1%} at the 90th percentile"
        + (
            ": above 5% the run likely preempted (a preempted request sat in more steps than "
            "it has tokens) and the fit is not to be trusted; fit on a lighter run."
            if np.percentile(steps, 90) > 0.05
            else "."
        )
    )


def _step_times(run):
    """The step times ``--scheduler-alone`` read off ``run`` (every token's time where the
    result keeps them, else 1 s bins)."""
    from pagesim.calibrate.step_times import from_token_times, reconstruct

    tokens = run.meta.get("token_times_s")
    return from_token_times(run, tokens) if tokens is not None else reconstruct(run)


def replay_own_steps(spec, run, measured: pd.DataFrame, cost_name: str):
    """The recorded-steps replay's rows and the profile's priced decode times
    (``--scheduler-alone``, module docstring), and replay.md's section on them."""
    from pagesim.calibrate.step_times import (
        priced_decode_times,
        recorded_costs,
        split_half_errors,
        step_count_errors,
    )
    from pagesim.experiments.validation import vcsv
    from pagesim.simulator import simulate
    from pagesim.simulator.costmodel.factory import make_cost_model
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model

    shadow = make_cost_model(
        spec.hardware, get_model(spec.hardware.model), get_gpu(spec.hardware.gpu)
    )
    recorded = recorded_costs(run, shadow=shadow)
    result = simulate(spec, trace=run.trace(), cost_model=recorded)
    ids = dict(dataset=DATASET, run=run.name, rate=run.rate_req_s, launch="given", role="held_out")
    alone = vcsv.latency_rows(
        result.requests, measured, **ids, cost_model=vcsv.RECORDED_STEPS, headline=False
    )
    predicted, real = priced_decode_times(run, recorded.log)
    priced = vcsv.rows(
        **ids,
        cost_model=cost_name,
        headline=True,
        metric="decode_given_concurrency",
        predicted_s=predicted,
        measured_s=real,
    )
    if "token_times_s" in run.meta:
        errors = np.abs(step_count_errors(run, recorded.step_times))
        check = (
            "The steps are read from every token's time (a step ends where tokens arrive): "
            "counted between each request's first and last token, they hold its output − 1 "
            f"within {np.median(errors):.1%} at the median and "
            f"{np.percentile(errors, 90):.1%} at the 90th percentile."
        )
    else:
        errors = np.abs(split_half_errors(run))
        check = (
            "Fitted on half the requests, the step times predict the other half's decode step "
            f"counts within {np.median(errors):.1%} at the median and "
            f"{np.percentile(errors, 90):.1%} at the 90th percentile (four random halvings). "
            "They are means over 1 s: a step that carries a prompt chunk is longer than its "
            "neighbours, so a TTFT of a few steps without queueing comes out short (a TTFT "
            "that is mostly queueing does not)."
        )
    lines = [
        "",
        "## The scheduler's error apart from the cost model's",
        "",
        f"`--scheduler-alone`: the run replayed again with every step lasting what your "
        f"server's steps lasted at that moment, read off the result's token times "
        f"({recorded.description}); its errors are the scheduler's and the pool's alone "
        f"(`{vcsv.RECORDED_STEPS}` in `{vcsv.FILE_NAME}`). The same replay prices each step "
        f"with {cost_name} too: each request's decode time priced so over its real decode "
        "window is the step cost's error alone (`decode_given_concurrency`). The step times "
        "assume every step gives every decoding request a token (no preemption). " + check,
        "",
        "| statistic | measured (ms) | scheduler alone | error | step cost alone: decode time "
        "| error |",
        "|---|---|---|---|---|---|",
    ]
    decode = {r["stat"]: r for r in priced}
    for r in alone:
        d = decode[r["stat"]] if r["metric"] == "tpot" else None
        lines.append(
            f"| {r['metric'].upper()} {r['stat']} | {r['measured_ms']:.4g} | "
            f"{r['predicted_ms']:.4g} | {r['error']:+.1%} | "
            + (
                f"{d['predicted_ms']:.4g} vs {d['measured_ms']:.4g} | {d['error']:+.1%} |"
                if d
                else "— | — |"
            )
        )
    return alone + priced, lines, result.requests, recorded
