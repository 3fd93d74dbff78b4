"""The serving path's fit on per-request records (calibrate/serving.py): records that
pagesim itself produced under a known serving path give that path back, and the
pieces (the solver, the prefill groups, the form rule) do what they say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pagesim.calibrate.lsq import least_squares
from pagesim.calibrate.serving import (
    Coefficients,
    FormFit,
    _clusters,
    choose_form,
    decode_time_errors,
    fit_serving,
)
from pagesim.records.run import MeasuredRun, check_records
from pagesim.simulator import simulate
from pagesim.simulator.costmodel.factory import cost_model_for
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.spec import run_spec_from_dict

FIXTURE = Path(__file__).parents[1] / "simulator" / "fixtures" / "tiny_profile.yaml"
TRUE = {
    "const_s": 2e-3,
    "s_per_seq": 3e-4,
    "s_per_context_token": 5e-7,
    "s_per_prefill_token": 2e-6,
}
TRUE_DELAY_S = 0.015


def simulated_run(tmp_path, rate=1.5, num=300, seed=0) -> MeasuredRun:
    """A run's records as pagesim's vllm scheduler produces them under a known serving path."""
    doc = yaml.safe_load(FIXTURE.read_text())
    doc["serving"] = {"form": "seq_ctx", "coefficients": TRUE, "frontend_delay_s": TRUE_DELAY_S}
    path = tmp_path / "truth.yaml"
    path.write_text(yaml.safe_dump(doc))
    spec = run_spec_from_dict(
        {
            "workload": {
                "name": "synthetic",
                "num_requests": num,
                "prompt": {"dist": "uniform", "low": 20, "high": 600},
                "output": {"dist": "uniform", "low": 2, "high": 300},
            },
            "arrivals": {"process": "poisson", "rate_req_s": rate},
            "hardware": {"gpu": "a100-40gb", "profile": str(path)},
            "seed": seed,
        }
    )
    req = simulate(spec).requests
    table = check_records(
        req[["arrival_s", "prompt_len", "output_len", "first_token_s", "finish_s"]], "sim"
    )
    return MeasuredRun(f"sim-{rate:g}", "simulated", table, rate)


def kernels():
    return cost_model_for(
        str(FIXTURE), get_model("opt-13b"), get_gpu("a100-40gb"), with_serving=False
    )


def test_records_of_a_known_serving_path_give_it_back(tmp_path):
    run = simulated_run(tmp_path)
    fit = fit_serving([run], kernels(), selection_margin=0.001)
    assert fit.chosen.form == "seq_ctx"  # the form the records were made with
    got = fit.chosen.coefs
    assert got.step["const_s"] == pytest.approx(TRUE["const_s"], rel=0.15)
    assert got.step["s_per_seq"] == pytest.approx(TRUE["s_per_seq"], rel=0.15)
    assert got.step["s_per_context_token"] == pytest.approx(TRUE["s_per_context_token"], rel=0.15)
    assert got.frontend_delay_s == pytest.approx(TRUE_DELAY_S, rel=0.1)
    assert fit.chosen.decode_rms < 0.005
    # with the true coefficients the reconstruction predicts each decode time closely
    truth = Coefficients(
        {k: v for k, v in TRUE.items() if k != "s_per_prefill_token"},
        TRUE["s_per_prefill_token"],
        TRUE_DELAY_S,
    )
    d = decode_time_errors(run, kernels(), truth)
    ok = d["decode_measured_s"].notna()
    rel = d.loc[ok, "decode_predicted_s"] / d.loc[ok, "decode_measured_s"] - 1
    assert float(np.median(np.abs(rel))) < 0.01
    # and without the serving path it is far off: the test can tell the difference
    d0 = decode_time_errors(run, kernels(), Coefficients(step={}))
    rel0 = d0.loc[ok, "decode_predicted_s"] / d0.loc[ok, "decode_measured_s"] - 1
    assert float(np.median(rel0)) < -0.05, float(np.median(rel0))


def test_the_fit_is_deterministic(tmp_path):
    run = simulated_run(tmp_path, num=120)
    a, b = fit_serving([run], kernels()), fit_serving([run], kernels())
    assert a.table().equals(b.table())
    assert a.serving_path().to_dict() == b.serving_path().to_dict()


def test_first_tokens_close_together_are_one_prefill_step():
    ft = np.array([1.0, 1.0003, 2.0, 1.0006, 3.0, 3.004])
    assert _clusters(ft).tolist() == [0, 0, 1, 0, 2, 2]


def test_a_form_with_more_coefficients_must_win_by_the_margin():
    def form(name, cv):
        return FormFit(name, Coefficients({}), 0, 0, cv, np.zeros(1), np.zeros(1), 1)

    fits = [form("const", 0.050), form("seq", 0.020), form("seq_ctx", 0.017)]
    assert choose_form(fits, margin=0.005).form == "seq"
    assert choose_form(fits, margin=0.002).form == "seq_ctx"
    assert choose_form([form("seq", 0.02), form("ctx", 0.01)], margin=0.005).form == "ctx"


def test_least_squares_solves_a_bounded_nonlinear_fit():
    x = np.linspace(0, 3, 40)
    y = 2.0 * np.exp(-0.7 * x) + 0.3

    def res(p):
        return p[0] * np.exp(-p[1] * x) + p[2] - y

    fit = least_squares(res, np.array([1.0, 1.0, 0.0]))
    assert fit.x == pytest.approx([2.0, 0.7, 0.3], rel=1e-4)
    # a bound that binds: the best non-negative offset for data shifted below zero is 0
    fit = least_squares(lambda p: p - np.array([-1.0, 2.0]), np.array([1.0, 1.0]))
    assert fit.x == pytest.approx([0.0, 2.0])


def test_report_table_lists_every_form(tmp_path):
    fit = fit_serving([simulated_run(tmp_path, num=80)], kernels(), forms=["const", "seq"])
    table = fit.table()
    assert isinstance(table, pd.DataFrame) and table["form"].tolist() == ["const", "seq"]
    assert table["chosen"].sum() == 1
