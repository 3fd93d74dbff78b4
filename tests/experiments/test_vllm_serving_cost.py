"""The serving-cost test of validate-vllm: one parameter fitted on some rates, others held out."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_vllm_validation import _write_run

from pagesim.experiments import vllm_serving_cost as S
from pagesim.experiments import vllm_validation as V
from pagesim.simulator.costmodel.factory import resolve_profile
from pagesim.simulator.specs import get_gpu


@pytest.mark.parametrize(
    ("form", "term", "coef", "scale"),
    [
        ("const", "step_overhead", "const_s", 1),
        ("per_seq", "step_overhead", "s_per_seq", 1),
        ("per_ctx_token", "paged_decode_attention", "s_per_token", 1 / 40),
    ],
)
def test_a_form_adds_exactly_its_value_to_one_coefficient(form, term, coef, scale):
    base = resolve_profile(S.BASE_PROFILE, get_gpu("a100-80gb"))
    got = S.with_serving_cost(form, 2e-3, num_layers=40)
    assert got.term(term).coef(coef) == pytest.approx(base.term(term).coef(coef) + 2e-3 * scale)
    assert "fitted on DistServe's vLLM runs" in got.term(term).origin
    for name in base.terms:  # nothing else changes
        if name != term:
            assert got.term(name) == base.term(name)


def _runs(folder: Path, slow_held_out: bool):
    _write_run(folder, 12, 1)
    _write_run(folder, 12, 2, seed=3)
    path = _write_run(folder, 12, 3, seed=5)
    if slow_held_out:  # change only the held-out run's measurements
        df = pd.read_csv(path)
        df["tpot_ms"] *= 5
        df.to_csv(path, index=False)
    return V.load_runs(folder)


def test_the_fit_uses_only_the_fit_rates(tmp_path):
    fits = {}
    for slow in (False, True):
        folder = tmp_path / f"data-{slow}"
        folder.mkdir()
        runs = _runs(folder, slow)
        fits[slow] = S.fit_form(runs, "per_seq", tmp_path)
    assert fits[False].value == fits[True].value  # the held-out run did not move it
    table = fits[True].runs
    assert table["is_fitted"].tolist() == [True, True, False]
    held = table[~table["is_fitted"]]["tpot_p50_err"].iloc[0]
    same = fits[False].runs[~fits[False].runs["is_fitted"]]["tpot_p50_err"].iloc[0]
    assert (1 + held) == pytest.approx((1 + same) / 5)  # the held-out error is reported
    lo, hi, _, _ = S.FORMS["per_seq"]
    assert lo <= fits[False].value <= hi


def test_concurrency_counts_decoding_requests_by_littles_law(tmp_path):
    runs = _runs(tmp_path, False)
    conc = S.concurrency(runs[:1])
    t = runs[0].table
    want = (t["complete_time"] - t["first_token_time"]).sum() / (
        t["complete_time"].max() - t["issue_time"].min()
    )
    assert conc["measured_decoding"].iloc[0] == pytest.approx(want)
    assert 0 < conc["prefill_steps"].iloc[0] <= conc["requests"].iloc[0] == 12
    assert np.isfinite(conc["replayed_decoding"]).all()
