"""Several models' whole steps pooled per layer (calibrate/per_layer_steps.py): the shipped
H100 profile rebuilt from its tables, the simulator scaling its coefficients by the priced
model's depth, and the refusals."""

import shlex
import shutil
import subprocess
import sys

import pytest
from numtext import float_noise_diff

from pagesim.calibrate.iterations import one_forward, read_steps
from pagesim.calibrate.per_layer_steps import fit_per_layer, leave_one_model_out, pooled_rows
from pagesim.calibrate.pipeline import DEFAULT_PROFILES_DIR
from pagesim.errors import DataError
from pagesim.simulator.costmodel.factory import cost_model_for
from pagesim.simulator.costmodel.iteration import step_features
from pagesim.simulator.costmodel.profile import load_profile
from pagesim.simulator.model_gpu_specs import get_gpu, get_model
from pagesim.simulator.plan import BatchPlan

ROOT = DEFAULT_PROFILES_DIR.parents[1]
SHIPPED = DEFAULT_PROFILES_DIR / "h100-sxm-compiled-steps"
TABLES = [
    DEFAULT_PROFILES_DIR / "h100-sxm-llama-2-7b-compiled-iterations" / "iterations.csv",
    DEFAULT_PROFILES_DIR / "h100-sxm-codellama-34b-tp2-compiled-iterations" / "iterations.csv",
]


def test_the_shipped_profile_is_what_its_tables_give(tmp_path):
    profile = load_profile(SHIPPED / "profile.yaml")
    words = shlex.split(profile.command)
    assert words[:3] == ["pagesim", "calibrate", "iterations"] and "--per-layer" in words
    assert [f"{p.parent.name}/{p.name}" for p in TABLES] == words[3:5]
    copy = tmp_path / SHIPPED.name
    shutil.copytree(SHIPPED, copy)
    fit_per_layer(
        TABLES, "h100-sxm", copy, seed=0, command=profile.command, date=profile.date,
        gpu_name=profile.gpu_name, forward="compiled",
    )  # fmt: skip
    for name in ("profile.yaml", "report.md"):
        diff = float_noise_diff((copy / name).read_text(), (SHIPPED / name).read_text())
        assert diff is None, f"{name} is stale ({diff}): {profile.command}"
    assert profile.software["iteration_scale"] == "per_layer"
    assert profile.software["allreduce_in_steps"] == "no"


def test_each_left_out_model_is_predicted_within_the_reports_figures():
    tables = [one_forward(read_steps(p), "compiled", p) for p in TABLES]
    lomo = leave_one_model_out(pooled_rows(tables))
    assert sorted(set(lomo["model"])) == ["codellama-34b", "llama-2-70b", "llama-2-7b"]
    assert (lomo["mape"] < 0.03).all(), lomo


def test_the_simulator_scales_one_layers_costs_by_the_models_depth():
    """A 40-layer model's step is the profile's per-layer law times 40: a model twice as deep
    with the same layer costs twice as much, and the per-step form would not."""
    profile = load_profile(SHIPPED / "profile.yaml")
    gpu = get_gpu("h100-sxm")
    plan = BatchPlan.from_lens(decode_context_lens=(1000,) * 24)
    for name in ("llama-2-7b", "qwen3-32b", "llama-2-70b"):
        model = get_model(name)
        cost = cost_model_for(SHIPPED.name, model, gpu, with_serving=False)
        f = step_features(model, 1, plan)
        c = profile.terms["decode_iteration"].coefficients
        layers = model.num_layers
        want = (
            c["const_s"] * layers
            + max(c["s_per_byte"] * f.bytes_, c["s_per_flop"] * f.flops)
            + c["s_per_seq"] * layers * f.seqs
            + c.get("s_per_token", 0.0) * layers * f.tokens
        )
        assert cost.step_time_s(plan) == pytest.approx(want, rel=1e-12), name


def test_pooling_needs_two_models_and_each_shard_once(tmp_path):
    one = one_forward(read_steps(TABLES[0]), "compiled", TABLES[0])
    with pytest.raises(DataError, match="pools several models' steps"):
        pooled_rows([one])
    with pytest.raises(DataError, match="llama-2-7b at TP 1 is in table 1 and table 2"):
        pooled_rows([one, one])
    out = subprocess.run(
        [sys.executable, "-m", "pagesim", "calibrate", "iterations", str(TABLES[0]),
         str(TABLES[1]), "--gpu", "h100-sxm", "--out", str(tmp_path / "p")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 2 and "--per-layer" in out.stderr
