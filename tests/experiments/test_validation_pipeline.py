"""`pagesim validate-vllm`: one pipeline (read → replay → compare → report, validation.csv).

Made-up runs written in DistServe's format by pagesim itself (a known serving path) check
the whole pipeline; the real runs (shared data, skipped where absent) check the targets
and that docs/validation.md and the shipped profile are what the command writes today."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from numtext import float_noise_diff, page_diff

from pagesim.cli import main
from pagesim.errors import ConfigError, DataError
from pagesim.experiments.validation import distserve, vcsv
from pagesim.experiments.validation.manifest import load_manifest
from pagesim.experiments.validation.pipeline import (
    PAGE_NAME,
    page_text,
    run_validation,
    write_validation,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SHIPPED = ROOT / "calibrate" / "profiles" / distserve.SERVING_PROFILE / "profile.yaml"


def _simulated_distserve_run(folder: Path, num: int, rate: float, seed: int) -> Path:
    """A run in DistServe's CSV format, made by pagesim under the shipped serving profile
    with the later launch's settings (made-up ShareGPT-like lengths)."""
    from pagesim.simulator import simulate
    from pagesim.simulator.spec import run_spec_from_dict

    manifest = load_manifest(distserve.MANIFEST)
    doc = manifest.settings_of("later")
    doc["hardware"] = {**doc["hardware"], "profile": str(SHIPPED), "kv_slots": 3989 * 16}
    doc["workload"] = {
        "name": "synthetic",
        "num_requests": num,
        "prompt": {"dist": "uniform", "low": 20, "high": 1200},
        "output": {"dist": "uniform", "low": 2, "high": 400},
    }
    doc["arrivals"] = {"process": "poisson", "rate_req_s": rate}
    doc["seed"] = seed
    req = simulate(run_spec_from_dict(doc)).requests
    issue = 5000.0 + req["arrival_s"]
    path = folder / f"vllm-{num}-{rate:g}.csv"
    pd.DataFrame(
        {
            "issue_time": issue,
            "first_token_time": 5000.0 + req["first_token_s"],
            "complete_time": 5000.0 + req["finish_s"],
            "prompt_len": req["prompt_len"],
            "output_len": req["output_len"],
            "ttft_ms": req["ttft_s"] * 1e3,
            "tpot_ms": req["tpot_s"] * 1e3,
            "latency_ms": req["e2e_s"] * 1e3,
        }
    ).to_csv(path, index=False)
    return path


def test_the_pipeline_on_runs_made_under_a_known_serving_path(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _simulated_distserve_run(data, 150, 1.5, seed=1)  # the manifest's fit run
    _simulated_distserve_run(data, 120, 2.5, seed=2)  # not in the manifest: held out
    out = tmp_path / "out"
    assert main(["validate-vllm", "--data", str(data), "--out", str(out)]) == 0
    table = vcsv.read(out / vcsv.FILE_NAME)
    assert list(table.columns) == list(vcsv.COLUMNS)
    assert set(table["role"]) == {"fit", "held_out"}
    assert set(table.loc[table["headline"], "cost_model"]) == {"serving"}
    assert set(table["metric"]) == set(vcsv.METRICS) | set(vcsv.OPEN_LOOP_METRICS)
    assert set(table["stat"]) == set(vcsv.STATS)
    # one row per run x cost model x metric x statistic
    assert not table.duplicated(["run", "cost_model", "metric", "stat"]).any()
    # the serving path refitted on pagesim's own records predicts its held-out run closely
    held = table[(table["role"] == "held_out") & (table["cost_model"] == "serving")]
    tpot = held[(held["metric"] == "tpot") & (held["stat"] == "p50")]["error"].abs().max()
    decode = held[(held["metric"] == "decode_given_concurrency") & (held["stat"] == "mean")][
        "error"
    ]
    assert tpot < 0.03 and abs(decode.iloc[0]) < 0.02
    # without it the kernels alone are far off: the comparison can fail
    kern = table[(table["role"] == "held_out") & (table["cost_model"] == "kernels")]
    assert kern[(kern["metric"] == "tpot") & (kern["stat"] == "p50")]["error"].iloc[0] < -0.15
    page = (out / PAGE_NAME).read_text()
    assert str(tmp_path) not in page  # no machine path in a page that may be committed
    assert "vllm-120-2.5" in page and "not in the manifest" in page
    assert (out / f"validation_{distserve.NAME}.png").stat().st_size > 0
    assert (out / "profiles" / distserve.SERVING_PROFILE / "profile.yaml").is_file()


def test_unknown_folders_and_bad_manifests_are_one_line_errors(tmp_path):
    with pytest.raises(DataError, match="not a folder"):
        write_validation(tmp_path / "missing", tmp_path / "out")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DataError, match="not a dataset pagesim knows"):
        write_validation(tmp_path, tmp_path / "out")
    bad = tmp_path / "m.yaml"
    text = (Path(distserve.__file__).parent / distserve.MANIFEST).read_text()
    bad.write_text(text.replace("default_launch: later", "default_launch: later\ncolour: blue"))
    with pytest.raises(ConfigError, match="colour: unknown key"):
        load_manifest(bad)
    bad.write_text(text.replace("vllm-300-3: {launch: later", "vllm-300-3: {launch: middle"))
    with pytest.raises(ConfigError, match="runs.vllm-300-3.launch: 'middle' is not one of"):
        load_manifest(bad)


def test_validation_csv_rows_say_what_they_compare():
    rows = vcsv.rows(
        dataset="d",
        run="r",
        rate=1.0,
        launch="l",
        role="fit",
        cost_model="c",
        headline=True,
        metric="ttft",
        predicted_s=np.array([0.1, 0.2, 0.3]),
        measured_s=np.array([0.1, 0.1, 0.4]),
    )
    by = {r["stat"]: r for r in rows}
    assert by["p50"]["predicted_ms"] == pytest.approx(200) and by["p50"][
        "measured_ms"
    ] == pytest.approx(100)
    assert by["p50"]["error"] == pytest.approx(1.0)
    assert by["mean"]["error"] == pytest.approx(0.2 / 0.2 - 1)


# ---- the real runs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory, shared_data):
    data = shared_data("distserve_vllm_opt13b")
    out = tmp_path_factory.mktemp("validation")
    return data, out, run_validation(data, out)


def _goal(goals, start):
    return next(g for g in goals if g.text.startswith(start))


def test_real_vllm_targets_hold_on_the_held_out_runs(real):
    _, _, (study, table, goals, _) = real
    assert study.headline.name == "serving"
    for start in (
        "TPOT p50 within ±10%",
        "TTFT p50 within ±25%",
        "mean decode time given",
        "cross-launch runs",
    ):
        goal = _goal(goals, start)
        assert goal.met, f"{goal.text}: {goal.detail}"
    # the fit run is the manifest's, and no held-out run was fitted
    assert set(table.loc[table["role"] == "fit", "run"]) == {"vllm-150-1.5"}


@pytest.mark.xfail(
    strict=True,
    reason="the v0.2 memory model gives 3,989 blocks where the records' ceiling is 3,525: "
    "the replay saturates at about 4.05 req/s (vllm-400-4's requests sent faster), the "
    "server at 3.2 (docs/validation.md)",
)
def test_real_vllm_saturation_within_0_3_req_s(real):
    _, _, (_, _, goals, _) = real
    goal = _goal(goals, "saturation")
    assert goal.met, goal.detail


def test_real_vllm_predicted_saturation_beyond_the_runs(real):
    """No later-launch run saturates under the headline: the highest-rate run's requests
    sent faster (arrivals scaled) say where it would, a number beside the measured one."""
    _, _, (study, _, goals, _) = real
    crossing, run, points = study.extra["beyond"]
    assert run == "vllm-400-4"
    rates = [r for r, _ in points]
    p50s = [t for _, t in points]
    assert rates == sorted(rates) and rates[0] == 4.0 and p50s[0] < 1.0 < p50s[-1]
    assert 4.0 < crossing < rates[1]
    assert (
        f"{crossing:.2f} with vllm-400-4's requests sent faster"
        in _goal(goals, "saturation").detail
    )


def test_shipped_serving_profile_is_the_refit(real):
    _, out, _ = real
    refit = out / "profiles" / distserve.SERVING_PROFILE / "profile.yaml"
    diff = float_noise_diff(refit.read_text(), SHIPPED.read_text())
    assert diff is None, (
        f"the shipped serving profile is stale ({diff}): run the fit-serving command in its "
        "'command'"
    )


def test_docs_validation_page_is_up_to_date(real):
    _, _, (study, table, goals, replays) = real
    diff = page_diff(page_text(study, table, goals, replays), (DOCS / "validation.md").read_text())
    assert diff is None, (
        f"docs/validation.md is stale ({diff}): run `pagesim validate-vllm --data "
        "../shared/data/distserve_vllm_opt13b --out OUT --docs docs/validation.md`"
    )
    assert (DOCS / f"validation_{distserve.NAME}.png").is_file()


def test_fit_serving_command_reproduces_the_shipped_profile(real, tmp_path):
    data, _, _ = real
    code = main(
        [
            "calibrate",
            "fit-serving",
            "--records",
            str(data / "vllm-150-1.5.csv"),
            "--model",
            "opt-13b",
            "--gpu",
            "a100-80gb",
            "--base",
            "a100-80gb-vidur",
            "--padding",
            "--origin=vllm-150-1.5.csv=LLMServe/DistServe@20a1633",
            "--server",
            distserve.SERVER,
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    from pagesim.simulator.costmodel.profile import load_profile

    # the shipped profile is this fit plus the conformal factor the validation recorded
    fitted, shipped = load_profile(tmp_path / "profile.yaml"), load_profile(SHIPPED)
    assert fitted.intervals is None and shipped.intervals is not None
    refit = fitted.with_terms(intervals=shipped.intervals).to_dict()
    assert float_noise_diff(yaml.safe_dump(refit), yaml.safe_dump(shipped.to_dict())) is None


# ---- vLLM 0.19 (V1) runs from LLMServingSim --------------------------------------------


@pytest.fixture(scope="module")
def v019(tmp_path_factory, shared_data):
    data = shared_data("llmservingsim_vllm019")
    out = tmp_path_factory.mktemp("validation-v019")
    return data, run_validation(data, out)


def _rows(table, run, metric):
    sub = table[
        (table["run"] == run) & (table["cost_model"] == "kernels") & (table["metric"] == metric)
    ]
    return sub.set_index("stat")["error"]


def test_vllm019_the_rtx4090_run_is_within_five_percent(v019):
    _, (study, table, _, _) = v019
    run = "RTX4090-Llama-3.1-8B"
    assert [v.name for v in study.runs] == [
        "RTX4090-Llama-3.1-8B", "RTXPRO6000-Llama-3.1-8B", "RTXPRO6000-Qwen3-32B",
    ]  # fmt: skip
    assert "not replayed, a mixture-of-experts model" in " ".join(study.extra["skipped"])
    for metric in ("ttft", "tpot", "e2e"):
        errors = _rows(table, run, metric)
        assert abs(errors["p50"]) <= 0.05 and abs(errors["mean"]) <= 0.05, (metric, errors)
    # the pool replayed is the engine's own, and the blocks in use follow kv_cache_pct
    rtx = next(v for v in study.runs if v.name == run)
    assert rtx.settings["hardware"]["kv_slots"] == 2588 * 16
    kv = study.extra["kv_series"][run]
    assert np.mean(np.abs(kv["sim_pct"] - kv["real_pct"])) <= 5.0


def test_vllm019_the_mixed_step_term_only_adds_time(v019):
    """vllm019_mixed_protocol.md: the headline profiles carry mixed_decode_attention;
    `kernels-additive` is the same profile without it (held out too). The term prices a
    mixed step's decodes on top of the additive sum, so every run's replay under the
    headline is slower than under the additive profile, and by less than the mixed
    rows' worst excess over the sum (4x)."""
    from pagesim.experiments.validation.vllm019 import ADDITIVE

    _, (study, table, _, _) = v019
    assert [c.name for c in study.cost_models][:3] == ["analytic", "kernels", ADDITIVE]
    additive = table[table["cost_model"] == ADDITIVE]
    assert set(additive["role"]) == {"held_out"} and not additive["headline"].any()
    for v in study.runs:
        for metric in ("tpot", "e2e"):
            with_term = _rows(table, v.name, metric)
            sub = additive[(additive["run"] == v.name) & (additive["metric"] == metric)]
            without = sub.set_index("stat")["error"]
            for stat in ("p50", "mean"):
                ratio = (1 + with_term[stat]) / (1 + without[stat])
                assert 1.0 < ratio < 4.0, (v.name, metric, stat, ratio)


@pytest.mark.xfail(
    strict=True,
    reason="the imported layer profiles hold no host time and no measured TP all-reduce "
    "(docs/validation_vllm019.md): the RTX PRO 6000 runs are 7-38% fast; with the runs' own "
    "step times the scheduler is within 3% there, and the profile prices the replayed "
    "decodes 7% and 27% low",
)
def test_vllm019_every_dense_run_is_within_five_percent(v019):
    _, (study, table, _, _) = v019
    for v in study.runs:
        for metric in ("ttft", "tpot", "e2e"):
            errors = _rows(table, v.name, metric)
            assert abs(errors["p50"]) <= 0.05 and abs(errors["mean"]) <= 0.05, (v.name, metric)


def test_vllm019_the_scheduler_alone_where_the_step_times_hold(v019):
    """Replayed with the real run's own step times (recorded-steps), the V1 scheduler and
    pool hold the issue's ±5% on the runs whose step times the records pin down (split-half
    p90 under 5%: the RTX PRO 6000 runs; the RTX 4090 run preempted, and its
    reconstruction is reported, not held to it). The cost model alone is the
    decode_given_concurrency row of the headline, one per statistic and run."""
    from pagesim.calibrate.step_times import split_half_errors
    from pagesim.experiments.validation.vllm019 import RECORDED

    _, (study, table, _, _) = v019
    held = [v for v in study.runs if np.percentile(np.abs(split_half_errors(v.run)), 90) < 0.05]
    assert [v.name for v in held] == ["RTXPRO6000-Llama-3.1-8B", "RTXPRO6000-Qwen3-32B"]
    for v in held:
        for metric in ("ttft", "tpot", "e2e"):
            sub = table[
                (table["run"] == v.name)
                & (table["cost_model"] == RECORDED)
                & (table["metric"] == metric)
            ].set_index("stat")["error"]
            assert abs(sub["p50"]) <= 0.05 and abs(sub["mean"]) <= 0.05, (v.name, metric, sub)
        # the engine's own 1 s series of running and waiting requests, not used to read the
        # step times, is followed too
        series = study.extra["series_shown"][f"{v.name}, {RECORDED}"]
        for what in ("running", "waiting"):
            gap = np.mean(np.abs(series[f"sim_{what}"] - series[f"real_{what}"]))
            assert gap <= 3.0, (v.name, what, gap)
    recorded = table[table["cost_model"] == RECORDED]
    assert set(recorded["role"]) == {"held_out"} and not recorded["headline"].any()
    cost_alone = table[table["metric"] == "decode_given_concurrency"]
    assert len(cost_alone) == 3 * len(study.runs)
    assert set(cost_alone["cost_model"]) == {"kernels"} and cost_alone["headline"].all()
    assert np.isfinite(cost_alone["error"]).all()


def test_vllm019_a_serving_path_fitted_on_the_first_half_predicts_the_second(v019):
    """vllm019_serving_protocol.md: each run's serving path fitted on its first 150
    requests (over the recorded-steps replay's batches), the run replayed closed loop under
    the headline plus it; the second half's requests, nothing fitted on them, land within
    the issue's ±5% (TTFT, TPOT, E2E mean and p50) on every dense run. Not the headline:
    the goals stay on `kernels`."""
    from pagesim.experiments.validation.vllm019 import SERVED

    _, (study, table, _, _) = v019
    served = table[table["cost_model"] == SERVED]
    assert not served["headline"].any()
    fits = study.extra["serving_half"]
    assert list(fits) == [v.name for v in study.runs]
    for v in study.runs:
        assert fits[v.name]["half"] == 150
        first = served[served["run"] == f"{v.name} (first half)"]
        second = served[served["run"] == f"{v.name} (second half)"]
        assert set(first["role"]) == {"fit"} and set(second["role"]) == {"held_out"}
        for metric in ("ttft", "tpot", "e2e"):
            sub = second[second["metric"] == metric].set_index("stat")["error"]
            assert abs(sub["p50"]) <= 0.05 and abs(sub["mean"]) <= 0.05, (v.name, metric, sub)
        # the kernels alone price the held-out half's decodes short; the fitted path does not
        before, after = fits[v.name]["errors"]["second half"]
        assert abs(after["mean"]) < abs(before["mean"]), (v.name, before, after)
    # the charts show the study's own cost models only
    assert SERVED not in [c.name for c in study.cost_models]
    # addendum 3: each RTX PRO 6000 run under the other model's fitted serving path
    from pagesim.experiments.validation.vllm019 import OTHER

    assert study.extra["serving_other"] == {
        "RTXPRO6000-Llama-3.1-8B": "RTXPRO6000-Qwen3-32B",
        "RTXPRO6000-Qwen3-32B": "RTXPRO6000-Llama-3.1-8B",
    }
    other = table[table["cost_model"] == OTHER]
    assert set(other["role"]) == {"held_out"} and len(other) == 2 * 9
    # intervals: the factor fitted on the first halves, every row with its interval
    cov = study.extra["serving_half_intervals"]
    assert 0 < cov["factor"] < np.inf
    assert served[["lo_ms", "hi_ms"]].notna().all().all()
    assert (served["lo_ms"] <= served["predicted_ms"]).all()
    assert (served["predicted_ms"] <= served["hi_ms"]).all()
    inside = (served["lo_ms"] <= served["measured_ms"]) & (served["measured_ms"] <= served["hi_ms"])
    assert (served["covered"].astype(bool) == inside).all()


def test_vllm019_a_serving_path_moves_to_another_gpu_for_the_same_model(v019):
    """vllm019_serving_protocol.md, addendum 4: each Llama-3.1-8B run replayed under its
    own headline plus the serving path fitted on the other GPU's run's first half. Nothing
    of the replayed run was fitted (held out): it lands within 6% of every TTFT, TPOT and
    E2E mean and p50 (the RTX 4090 run, which preempted, is the farther, +5.5% at most).
    Qwen3-32B has no partner on another GPU."""
    from pagesim.experiments.validation.vllm019 import OTHER_GPU

    _, (study, table, _, _) = v019
    assert study.extra["serving_other_gpu"] == {
        "RTX4090-Llama-3.1-8B": "RTXPRO6000-Llama-3.1-8B",
        "RTXPRO6000-Llama-3.1-8B": "RTX4090-Llama-3.1-8B",
    }
    moved = table[table["cost_model"] == OTHER_GPU]
    assert set(moved["role"]) == {"held_out"} and not moved["headline"].any()
    assert len(moved) == 2 * 9
    for run in study.extra["serving_other_gpu"]:
        alone = _rows(table, run, "e2e")
        for metric in ("ttft", "tpot", "e2e"):
            sub = moved[(moved["run"] == run) & (moved["metric"] == metric)]
            errors = sub.set_index("stat")["error"]
            assert abs(errors["p50"]) <= 0.06 and abs(errors["mean"]) <= 0.06, (run, metric)
        # and the path moves the run: its E2E differs from the kernels alone
        e2e = moved[(moved["run"] == run) & (moved["metric"] == "e2e")].set_index("stat")
        assert e2e.loc["p50", "error"] != pytest.approx(alone["p50"], abs=0.01)


def test_vllm019_the_peer_link_variants_are_post_hoc_and_slow_the_tp2_run_only(v019):
    """vllm019_link_protocol.md: the TP 2 run replayed with the peer's link figures (read
    from its config.json: 16 GB/s, 20 us, slower than the GPU spec's 64 GB/s and 10 us), on
    the headline and on addendum 3's transfer. Post hoc rows, never the headline; at TP 1
    there is no all-reduce and no replay; every latency statistic grows."""
    from pagesim.experiments.validation.vllm019 import OTHER, OTHER_PEER_LINK, PEER_LINK

    _, (study, table, _, _) = v019
    qwen = next(v for v in study.runs if v.name == "RTXPRO6000-Qwen3-32B")
    link = qwen.info["peer_link"]
    assert (link["bus_bw_gbps"], link["latency_us"]) == (16.0, 20.0)
    for variant, base in ((PEER_LINK, "kernels"), (OTHER_PEER_LINK, OTHER)):
        rows = table[table["cost_model"] == variant]
        assert set(rows["run"]) == {qwen.name} and len(rows) == 9, variant
        assert set(rows["role"]) == {"post_hoc"} and not rows["headline"].any()
        before = table[(table["cost_model"] == base) & (table["run"] == qwen.name)]
        joined = rows.merge(before, on=["metric", "stat"], suffixes=("", "_base"))
        assert len(joined) == 9 and (joined["predicted_ms"] > joined["predicted_ms_base"]).all()


def test_vllm019_peer_link_reads_the_config_or_says_why_not(tmp_path):
    from pagesim.errors import DataError
    from pagesim.experiments.validation.vllm019 import peer_link

    path = tmp_path / "config.json"
    assert peer_link(path) is None  # no file: no variant
    path.write_text('{"link_bw": 16}')
    assert peer_link(path) is None  # no latency: no variant
    path.write_text('{"link_bw": 25, "link_latency": 5000}')
    link = peer_link(path)
    assert (link["bus_bw_gbps"], link["latency_us"]) == (25.0, 5.0)
    assert "link_bw 25 GB/s" in link["source"]
    path.write_text("{not json")
    with pytest.raises(DataError, match="config.json: not JSON"):
        peer_link(path)


def test_docs_validation_vllm019_page_is_up_to_date(v019):
    _, (study, table, goals, replays) = v019
    diff = page_diff(
        page_text(study, table, goals, replays), (DOCS / "validation_vllm019.md").read_text()
    )
    assert diff is None, (
        f"docs/validation_vllm019.md is stale ({diff}): run `pagesim validate-vllm --data "
        "../shared/data/llmservingsim_vllm019 --out OUT --docs docs/validation_vllm019.md`"
    )


# ---- vLLM 0.15.1 (V1) on H100 from inference-sim ------------------------------------------


@pytest.fixture(scope="module")
def h100(tmp_path_factory, shared_data):
    data = shared_data("inference_sim_h100_v0151")
    out = tmp_path_factory.mktemp("validation-h100")
    return data, run_validation(data, out)


def test_h100_stages_that_kept_up_are_replayed_and_the_rest_said(h100):
    _, (study, table, goals, _) = h100
    skipped = " ".join(study.extra["skipped"])
    assert skipped.count("mixture-of-experts") == 4
    assert "reasoning stage 0 (4 req/s): overloaded" in skipped
    assert len(study.runs) == 15 and set(table["metric"]) == {"e2e", "ttft", "itl"}


@pytest.mark.xfail(
    strict=True,
    reason="the headline replays V1 without its async scheduling (vLLM's default from "
    "v0.14): admissions a step early, and the profile's vLLM v0 host overhead added to each "
    "step instead of overlapped; post hoc variants with both give E2E 11.9%, TTFT 9.2%; "
    "the compiled whole steps timed on an H100, with async scheduling, E2E 8.6%, TTFT 22.6% "
    "(docs/validation_h100.md)",
)
def test_h100_median_errors_within_the_targets(h100):
    _, (_, _, goals, _) = h100
    assert all(g.met for g in goals), [g.detail for g in goals]


def test_h100_same_gpu_steps_replay_every_dense_stage_under_its_own_models_profile(h100):
    # experiments/validation/h100_protocol.md: where the iterations profiles are used
    from pagesim.experiments.validation.h100 import COMPILED_ASYNC

    _, (study, table, _, replays) = h100
    # iterations: every dense stage under its own model's profile (addendum 2);
    # iterations-compiled and its async twin: post hoc (addendum, addendum 3)
    for name, role in (("iterations", "held_out"), ("iterations-compiled", "post_hoc"),
                       (COMPILED_ASYNC, "post_hoc")):  # fmt: skip
        rows = table[table["cost_model"] == name]
        assert set(rows["run"]) == {v.name for v in study.runs}
        assert len(set(rows["run"])) == 15 and not rows["headline"].any()
        assert set(rows["role"]) == {role}
    for name, suffix in (("iterations", ""), ("iterations-compiled", "-compiled"),
                         (COMPILED_ASYNC, "-compiled")):  # fmt: skip
        choice = next(c for c in study.cost_models if c.name == name)
        for run, profile in (("llama-2-70b-tp4-general/s0", "llama-2-70b-tp4"),
                             ("codellama-34b-tp2-codegen/s0", "codellama-34b-tp2"),
                             ("llama-2-7b-tp1-codegen/s0", "llama-2-7b")):  # fmt: skip
            assert choice.profile_for(run) == f"h100-sxm-{profile}{suffix}-iterations"
        assert (
            "analytic NVLink all-reduces added"
            in replays[("llama-2-70b-tp4-general/s0", name)].description
        )


def test_h100_compiled_steps_under_async_scheduling_move_ttft_only(h100):
    """h100_protocol.md, addendum 3: the compiled steps with async scheduling, post hoc.
    Nothing is added to a step, so against iterations-compiled every stage's mean TTFT
    rises by about a decode step and its E2E by under 1%."""
    from pagesim.experiments.validation.h100 import COMPILED_ASYNC

    _, (study, table, _, _) = h100
    for v in study.runs:
        got = {}
        for name in ("iterations-compiled", COMPILED_ASYNC):
            sub = table[(table["cost_model"] == name) & (table["run"] == v.name)]
            got[name] = sub[sub["stat"] == "mean"].set_index("metric")["predicted_ms"]
        gap = got[COMPILED_ASYNC]["ttft"] - got["iterations-compiled"]["ttft"]
        assert 5.0 < gap < 25.0, (v.name, gap)  # a compiled decode step: 5.5-20 ms
        assert abs(got[COMPILED_ASYNC]["e2e"] / got["iterations-compiled"]["e2e"] - 1) < 0.01


def test_h100_async_scheduling_is_a_post_hoc_variant_and_moves_ttft_only(h100):
    """async_scheduling_protocol.md: every dense stage replayed under the headline with
    vLLM's async scheduling (v0.15.1's default), post hoc. It delays each admission by a
    step, so every kept-up stage's mean TTFT rises by about one decode step of its model
    while E2E barely moves (one more step of hundreds); the goals' TTFT statistic under
    it (9.8%) is reported beside the headline's and not scored."""
    from pagesim.experiments.validation.h100 import ASYNC, _per_experiment

    _, (study, table, goals, replays) = h100
    rows = table[table["cost_model"] == ASYNC]
    assert set(rows["run"]) == {v.name for v in study.runs}
    assert set(rows["role"]) == {"post_hoc"} and not rows["headline"].any()
    assert [g.met for g in goals] == [False, False]  # the goals stay on the headline
    head = table[table["cost_model"] == study.headline.name]
    for v in study.runs:
        if v.rate >= 20:  # overloaded under both
            continue
        got = {}
        for name, sub in (("async", rows), ("sync", head)):
            by = sub[(sub["run"] == v.name) & (sub["stat"] == "mean")].set_index("metric")
            got[name] = by["predicted_ms"]
        ttft_gap = got["async"]["ttft"] - got["sync"]["ttft"]
        assert 5.0 < ttft_gap < 40.0, (v.name, ttft_gap)  # about a decode step, in ms
        assert abs(got["async"]["e2e"] / got["sync"]["e2e"] - 1) < 0.02, v.name
    assert _per_experiment(table, study, "ttft", ASYNC).median() < 0.2


def test_h100_host_overhead_overlapped_shortens_every_step(h100):
    """async_scheduling_protocol.md, addendum: kernels+async with each step lasting
    max(GPU work, host overhead) instead of their sum. Post hoc; every step is shorter, so
    every kept-up stage's mean E2E falls below kernels+async's; the goals' statistics
    under it (E2E 11.9%, TTFT 9.2%) are reported, not scored."""
    from pagesim.experiments.validation.h100 import ASYNC, ASYNC_OVERLAP, _per_experiment

    _, (study, table, _, replays) = h100
    rows = table[table["cost_model"] == ASYNC_OVERLAP]
    assert set(rows["role"]) == {"post_hoc"} and not rows["headline"].any()
    assert set(rows["run"]) == {v.name for v in study.runs}
    for v in study.runs:
        e2e = {}
        for name in (ASYNC, ASYNC_OVERLAP):
            sub = table[
                (table["cost_model"] == name)
                & (table["run"] == v.name)
                & (table["metric"] == "e2e")
                & (table["stat"] == "mean")
            ]
            e2e[name] = float(sub["predicted_ms"].iloc[0])
        assert e2e[ASYNC_OVERLAP] < e2e[ASYNC], v.name
    assert "host overhead (step_overhead) overlapping" in (
        replays[(study.runs[0].name, ASYNC_OVERLAP)].description
    )
    assert _per_experiment(table, study, "e2e", ASYNC_OVERLAP).median() < 0.15


def test_h100_intervals_follow_their_protocol(h100):
    """h100_intervals_protocol.md: the headline's E2E and TTFT statistics (not the client's
    ITL) get intervals from 10 replicates of the stage's requests drawn again and the kernel
    terms' multipliers; each stage's factor is fitted without its whole experiment; the
    coverage of the nominal 90% is inside the issue's 80-95% band."""
    from pagesim.experiments.validation.intervals import conformal_factor

    _, (study, table, _, _) = h100
    result, factor, _ = study.extra["intervals"]
    head = table[table["cost_model"] == study.headline.name]
    with_interval = head[head["lo_ms"].notna()]
    assert set(with_interval["metric"]) == {"e2e", "ttft"} and len(with_interval) == 90
    assert head.loc[head["metric"] == "itl", "lo_ms"].isna().all()
    assert table.loc[table["cost_model"] != study.headline.name, "lo_ms"].isna().all()
    experiment = {v.name: v.info["experiment"] for v in study.runs}
    exp = result["run"].map(experiment)
    for run in ("llama-2-7b-tp1-codegen/s0", "codellama-34b-tp2-general/s1"):
        own = experiment[run]
        expected = conformal_factor(result.loc[exp != own, "score"].to_numpy(), 0.9)
        assert result.loc[result["run"] == run, "factor"].iloc[0] == pytest.approx(expected)
        # fitted leaving the one stage out, it would differ: its siblings are held out too
        loose = conformal_factor(result.loc[result["run"] != run, "score"].to_numpy(), 0.9)
        assert loose != pytest.approx(expected)
    assert factor == pytest.approx(conformal_factor(result["score"].to_numpy(), 0.9))
    assert 0.80 <= result["covered"].mean() <= 0.95
    # the seeds source: seed 0 is the replayed draw, another seed other requests
    v = study.runs[0]
    assert v.redraw(0).table["prompt_len"].equals(v.trace.table["prompt_len"])
    other = v.redraw(1).table
    assert len(other) == len(v.trace.table)
    assert not np.array_equal(other["arrival_s"].to_numpy(), v.trace.table["arrival_s"].to_numpy())


def test_intervals_hold_out_a_group_of_runs_together():
    """With groups, a run's factor is fitted on the other groups' runs only; without, on
    every other run; and the seeds source is refused where the records fix the requests."""
    from pagesim.experiments.validation.intervals import calibrate, replicate_table
    from pagesim.experiments.validation.study import CostModelChoice, Study, ValidationRun
    from pagesim.records.run import RECORD_COLUMNS, MeasuredRun

    raw, measured = [], []
    for run, real in (("a1", 10.0), ("a2", 13.0), ("b1", 10.2), ("c1", 10.4), ("d1", 10.6)):
        raw.append(
            {"run": run, "metric": "e2e", "stat": "mean", "raw_lo_ms": 9.0, "raw_hi_ms": 11.0}
        )
        measured.append({"run": run, "metric": "e2e", "stat": "mean", "measured_ms": real,
                         "rate": 1.0})  # fmt: skip
    raw, measured = pd.DataFrame(raw), pd.DataFrame(measured)
    # scores (|real - 10| / 1): a1 0, a2 3, b1 0.2, c1 0.4, d1 0.6
    by_run, _ = calibrate(raw, measured, 0.75)
    groups = {"a1": "a", "a2": "a", "b1": "b", "c1": "c", "d1": "d"}
    by_group, _ = calibrate(raw, measured, 0.75, groups)
    # a1 left out alone is calibrated with its sibling a2's score 3 among the others; its
    # group left out, on b1, c1 and d1 only
    assert by_run.set_index("run").at["a1", "factor"] == pytest.approx(3.0)
    assert by_group.set_index("run").at["a1", "factor"] == pytest.approx(0.6)
    assert by_run.set_index("run").at["a2", "factor"] == pytest.approx(0.6)
    assert not by_group.set_index("run").at["a2", "covered"]
    run = MeasuredRun(name="r", dataset="d", table=pd.DataFrame(columns=list(RECORD_COLUMNS)),
                      rate_req_s=1.0, sources=(), meta={})  # fmt: skip
    vrun = ValidationRun(run=run, launch="x", role="held_out", settings={})
    study = Study(dataset="d", title="t", runs=[vrun],
                  cost_models=[CostModelChoice("kernels", None, headline=True)])  # fmt: skip
    with pytest.raises(ValueError, match="'seeds' needs requests that can be drawn again"):
        replicate_table(study, 0.9, 2, ["seeds", "cost"], 0)


def test_docs_validation_h100_page_is_up_to_date(h100):
    _, (study, table, goals, replays) = h100
    diff = page_diff(
        page_text(study, table, goals, replays), (DOCS / "validation_h100.md").read_text()
    )
    assert diff is None, (
        f"docs/validation_h100.md is stale ({diff}): run `pagesim validate-vllm --data "
        "../shared/data/inference_sim_h100_v0151 --out OUT --docs docs/validation_h100.md`"
    )


def test_the_engine_series_is_read_beside_the_replay_at_the_same_times():
    """vLLM 0.19's 1 s series (running, waiting, kv_cache_pct) against the replay's
    windows: each tick reads the window it falls in; after the replay's last step nothing
    runs or waits; a kv_cache_pct of zeros throughout is 'not recorded', not 0%."""
    from types import SimpleNamespace

    from pagesim.experiments.validation.vllm019 import _kv_series, _queue_lines

    windows = pd.DataFrame(
        {
            "t_s": [0.0, 1.0, 2.0],
            "duration_s": [1.0, 1.0, 1.0],
            "num_free_blocks": [90, 50, 80],
            "num_running": [2.0, 6.0, 1.0],
            "num_waiting": [1.0, 3.0, 0.0],
        }
    )
    rep = SimpleNamespace(timeseries=windows, kv_blocks=100)
    real = pd.DataFrame(
        {"t": [0.5, 1.5, 2.5, 4.0], "running": [2, 7, 1, 1], "waiting": [1, 5, 0, 2],
         "kv_cache_pct": [0.0, 0.0, 0.0, 0.0]}
    )  # fmt: skip
    vrun = SimpleNamespace(run=SimpleNamespace(meta={"timeseries": real}))
    s = _kv_series(vrun, rep)
    assert s["sim_running"].tolist() == [2.0, 6.0, 1.0, 0.0]
    assert s["sim_waiting"].tolist() == [1.0, 3.0, 0.0, 0.0]
    assert s["sim_pct"].tolist()[:3] == pytest.approx([10.0, 50.0, 20.0])
    assert s["real_pct"].isna().all()  # zeros throughout: the engine did not report it
    row = [line for line in _queue_lines({"r": s}) if line.startswith("| r |")][0]
    # running: real mean 2.75, replay 2.25, mean |diff| (0+1+0+1)/4; waiting 2.0, 1.0, 1.0
    assert row == "| r | 4 | 2.8 | 2.2 | 0.5 | 2.0 | 1.0 | 1.0 |"


def test_per_request_coverage_is_held_out_run_by_run():
    """Each request's interval comes from its own replicated values, widened by the factor
    fitted on the *other* runs' requests; regimes split at the saturation rate."""
    from pagesim.experiments.validation.intervals import request_coverage

    rng = np.random.default_rng(0)
    n, reps = 200, 40
    per_request, measured = {}, {}
    for run, scale in (("a", 1.0), ("b", 1.0), ("c", 3.0)):
        centre = rng.uniform(0.05, 0.2, n)
        spread = centre * 0.1 * rng.standard_normal((reps, n))
        for metric in ("ttft", "tpot", "e2e"):
            per_request[(run, metric)] = centre + spread
            # run c's real values sit three raw half-widths away: its own factor would be
            # about 3, the others' about 1, so it is not covered (held out)
            measured[(run, metric)] = centre * (1 + scale * 0.1 * rng.standard_normal(n))
    measured[("a", "tpot")][:10] = np.nan  # a one-token output has no TPOT
    cov = request_coverage(per_request, measured, {"a": 1.0, "b": 2.0, "c": 5.0}, 0.9, 3.0)
    below = cov[cov["regime"] == "below saturation"].set_index("metric")
    above = cov[cov["regime"] == "above saturation"].set_index("metric")
    assert list(below.index) == ["ttft", "tpot", "e2e"]
    assert below.loc["tpot", "requests"] == 2 * n - 10 and below.loc["ttft", "requests"] == 2 * n
    assert above.loc["ttft", "requests"] == n
    # a and b are checked with factors fitted with c among the others: wide enough
    assert (below["coverage"] >= 0.9).all()
    # c with the factor of a and b only: about one raw half-width, far too narrow for it
    assert (above["coverage"] < 0.6).all()


def test_the_rate_chart_draws_each_launch_on_its_own_row(tmp_path, monkeypatch):
    """Runs of different servers or models at one rate are never averaged into one curve."""
    from matplotlib.figure import Figure

    from pagesim.experiments.validation import report
    from pagesim.experiments.validation.study import CostModelChoice, Study

    rng = np.random.default_rng(0)
    lat = lambda: pd.DataFrame({f"{m}_s": rng.uniform(0.1, 1.0, 50) for m in vcsv.METRICS})  # noqa: E731
    rows = []
    for launch in ("small-model", "large-model"):
        for rate in (1.0, 2.0):
            rows += vcsv.latency_rows(
                lat(), lat(), dataset="d", run=f"{launch}/{rate}", rate=rate, launch=launch,
                role="held_out", cost_model="analytic", headline=True,
            )  # fmt: skip
    table = vcsv.frame(rows)
    drawn = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: drawn.append(fig))
    # rows of a cost model the study does not name (a dataset section's own) are not drawn
    rows += vcsv.latency_rows(
        lat(), lat(), dataset="d", run="small-model/1.0 (second half)", rate=1.0,
        launch="small-model", role="held_out", cost_model="another", headline=False,
    )  # fmt: skip
    table = vcsv.frame(rows)
    study = Study(
        dataset="d", title="t", runs=[], cost_models=[CostModelChoice("analytic", None, True)]
    )
    report.draw_chart(study, table, tmp_path / "chart.png")
    (fig,) = drawn
    assert all(len(ax.get_lines()) == 2 for ax in fig.axes)  # analytic's p50 and p90 only
    titles = [ax.get_title() for ax in fig.axes]
    assert len(fig.axes) == 2 * 3
    assert titles[:3] == ["TTFT: small-model", "TPOT: small-model", "E2E: small-model"]
    assert titles[3:] == ["TTFT: large-model", "TPOT: large-model", "E2E: large-model"]
    # each panel's curve holds its own launch's predictions only
    ttft_small = table[(table["launch"] == "small-model") & (table["metric"] == "ttft")
                       & (table["stat"] == "p50") & (table["cost_model"] == "analytic")
                       ].sort_values("rate")["predicted_ms"]  # fmt: skip
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_ydata()) == pytest.approx(list(ttft_small))


def test_the_rate_chart_tells_many_cost_models_apart_and_keeps_bands_on_the_panel(
    tmp_path, monkeypatch
):
    """Each cost model its own colour (up to ten), the legend beside the panels when there
    are more than three, and an interval reaching 0 drawn down to a tenth of the panel's
    smallest value, not to a floor that flattens the curves."""
    from matplotlib.figure import Figure

    from pagesim.experiments.validation import report
    from pagesim.experiments.validation.study import CostModelChoice, Study

    rng = np.random.default_rng(1)
    lat = lambda: pd.DataFrame({f"{m}_s": rng.uniform(0.1, 1.0, 50) for m in vcsv.METRICS})  # noqa: E731
    names = [f"model-{i}" for i in range(6)]
    rows = []
    for rate in (1.0, 2.0):
        for i, name in enumerate(names):
            rows += vcsv.latency_rows(
                lat(), lat(), dataset="d", run=f"r/{rate}", rate=rate, launch="x",
                role="held_out", cost_model=name, headline=i == 0,
            )  # fmt: skip
    table = vcsv.frame(rows)
    head = table["cost_model"] == "model-0"
    table.loc[head, "lo_ms"] = 0.0
    table.loc[head, "hi_ms"] = table.loc[head, "predicted_ms"] * 2
    drawn = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: drawn.append(fig))
    study = Study(dataset="d", title="t", runs=[],
                  cost_models=[CostModelChoice(n, None, i == 0) for i, n in enumerate(names)])  # fmt: skip
    report.draw_chart(study, table, tmp_path / "chart.png")
    (fig,) = drawn
    ax = fig.axes[0]
    colours = {line.get_color() for line in ax.get_lines()}
    assert len(colours) == len(names)
    assert fig.legends and ax.get_legend() is None
    sub = table[table["metric"] == "ttft"]
    floor = 0.1 * min(sub["measured_ms"].min(), sub["predicted_ms"].min())
    (band,) = ax.collections[2:]  # after the measured p50 and p90 points
    assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(floor)
