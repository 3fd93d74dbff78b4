"""Whole steps timed on a GPU (calibrate/iterations.py, benchmarks/gpu_iterations.py): the
plan, the table's reader, the rows fitted and left out, the fit on a known law, the
shipped H100 profile rebuilt from its own table, and the H100 replay that uses it only
where its protocol says."""

import csv
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from numtext import float_noise_diff

import pagesim
from pagesim.calibrate.iterations import (
    COLUMNS,
    DEFAULT_MODELS,
    fit_iterations,
    iteration_rows,
    parse_model,
    plan_steps,
    read_steps,
    repeat_section,
    step_features,
)
from pagesim.calibrate.pipeline import DEFAULT_PROFILES_DIR
from pagesim.errors import DataError
from pagesim.simulator.costmodel.profile import load_profile

ROOT = DEFAULT_PROFILES_DIR.parents[1]
SHIPPED = DEFAULT_PROFILES_DIR / "h100-sxm-llama-2-7b-iterations"
COMPILED = [
    DEFAULT_PROFILES_DIR / f"h100-sxm-{name}-compiled-iterations"
    for name in ("llama-2-7b", "codellama-34b-tp2", "llama-2-70b-tp4")
]
H200 = DEFAULT_PROFILES_DIR / "h200-llama-2-7b-iterations"
SHARDS = [
    DEFAULT_PROFILES_DIR / f"h100-sxm-{name}{forward}-iterations"
    for name in ("codellama-34b-tp2", "llama-2-70b-tp4")
    for forward in ("", "-compiled")
]


def test_the_plan_keeps_every_shape_inside_its_token_limits():
    shapes = plan_steps(max_kv_tokens=4096, max_prefill_tokens=2048)
    assert shapes and all(s.kv_tokens <= 4096 for s in shapes if s.phase == "decode")
    assert all(s.batch * s.new_tokens <= 2048 for s in shapes if s.phase == "prefill")
    assert all(s.new_tokens == 1 for s in shapes if s.phase == "decode")
    assert all(s.context == s.new_tokens for s in shapes if s.phase == "prefill")
    # decode first, then prefill
    phases = [s.phase for s in shapes]
    assert phases == sorted(phases, key=lambda p: p != "decode")
    for entry in DEFAULT_MODELS:
        model, tp = parse_model(entry)
        assert model.num_heads % tp == 0
    with pytest.raises(DataError, match="NAME@tpN"):
        parse_model("llama-2-7b@tpx")


def _table(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
    return path


def _row(**kw):
    row = dict(model="llama-2-7b", tensor_parallel=1, phase="decode", batch=4, new_tokens=1,
               context=512, median_s=0.007, iqr_s=1e-5, repeats=20, attention="flash_attention")  # fmt: skip
    return row | kw


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"phase": "mixed"}, r"line 3: phase 'mixed' is not one of \['prefill', 'decode'\]"),
        ({"median_s": 0}, "line 3: median_s must be a positive time"),
        ({"model": "no-such-model"}, "line 3: model 'no-such-model'"),
        ({"batch": 0}, "line 3"),
    ],
)
def test_a_bad_cell_is_named_by_file_line_and_column(tmp_path, change, message):
    path = _table(tmp_path / "it.csv", [_row(), _row(**change)])
    with pytest.raises(DataError, match=message) as err:
        read_steps(path)
    assert str(path) in str(err.value)


def test_a_missing_column_is_named(tmp_path):
    path = tmp_path / "it.csv"
    pd.DataFrame([_row()]).drop(columns=["attention"]).to_csv(path, index=False)
    with pytest.raises(DataError, match="missing column 'attention'"):
        read_steps(path)


def test_shard_rows_are_left_out_with_their_reason_and_never_fitted(tmp_path):
    rows = [_row(), _row(phase="prefill", new_tokens=64, context=64, median_s=0.008)]
    rows += [_row(model="llama-2-70b", tensor_parallel=4, median_s=0.018)]
    got = iteration_rows(read_steps(_table(tmp_path / "it.csv", rows)))
    assert sorted(got.rows["term"]) == ["decode_iteration", "prefill_iteration"]
    assert set(got.rows["tensor_parallel"]) == {1}
    assert got.left_out == (
        "llama-2-70b TP 4: 1 steps of one GPU's shard without the all-reduce (not fitted here: "
        "--model fits a model's shard)",
    )
    only_shards = read_steps(_table(tmp_path / "s.csv", rows[2:]))
    with pytest.raises(DataError, match="no TP-1 step in the table: give --model NAME"):
        iteration_rows(only_shards)
    # with --model, that model's shard steps are fitted and the others left out
    got = iteration_rows(read_steps(_table(tmp_path / "it.csv", rows)), "llama-2-70b")
    assert list(got.rows["tensor_parallel"]) == [4]
    assert got.left_out == ("llama-2-7b TP 1: 2 steps of another model",)
    with pytest.raises(DataError, match="--model 'opt-13b': no step of it in the table"):
        iteration_rows(only_shards, "opt-13b")


def _known_law_table(path, rng):
    """Steps whose time is a known function of the simulator's features, 1% noise."""
    rows = []
    for s in plan_steps():
        r = _row(phase=s.phase, batch=s.batch, new_tokens=s.new_tokens, context=s.context)
        f = step_features(pd.Series(r))
        t = 1.5e-3 + max(f.bytes_ / 2.5e12, f.flops / 6e14) + 2e-6 * f.tokens
        rows.append(r | {"median_s": t * (1 + 0.01 * rng.standard_normal())})
    return _table(path, rows)


def test_the_fit_recovers_a_known_law_and_writes_a_measured_profile(tmp_path):
    table = _known_law_table(tmp_path / "it.csv", np.random.default_rng(3))
    profile_path, report = fit_iterations(table, "h100-sxm", tmp_path / "out", command="test")
    profile = load_profile(profile_path)
    assert profile.kind == "measured" and profile.gpu_spec == "h100-sxm"
    for name in ("prefill_iteration", "decode_iteration"):
        assert profile.terms[name].heldout_mape < 0.03, name
    text = report.read_text()
    assert "## Sources" not in text  # pagesim's own times: no others' files to list
    assert "## The shipped profiles' price of the same steps" in text
    assert "| llama-2-7b | 1 | decode |" in text
    with pytest.raises(Exception, match="not a known GPU"):
        fit_iterations(table, "no-gpu", tmp_path / "bad")


def test_the_command_line_fits_a_table(tmp_path):
    table = _known_law_table(tmp_path / "it.csv", np.random.default_rng(4))
    out = subprocess.run(
        [sys.executable, "-m", "pagesim", "calibrate", "iterations", str(table),
         "--gpu", "h100-sxm", "--out", str(tmp_path / "p")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "p" / "profile.yaml").is_file() and "report:" in out.stdout


@pytest.mark.parametrize("shipped", [SHIPPED, *COMPILED, *SHARDS[::2], H200], ids=lambda p: p.name)
def test_the_shipped_profile_is_what_its_own_table_gives(tmp_path, shipped):
    copy = tmp_path / shipped.name
    shutil.copytree(shipped, copy)
    profile = load_profile(shipped / "profile.yaml")
    command = profile.command
    gpu = profile.gpu_spec
    assert command.startswith(f"pagesim calibrate iterations iterations.csv --gpu {gpu}")
    words = shlex.split(command)
    model = words[words.index("--model") + 1] if "--model" in words else None
    forward = words[words.index("--forward") + 1] if "--forward" in words else None
    assert (model is not None) == (shipped in SHARDS)
    assert (forward == "compiled") == (shipped in COMPILED)
    fit_iterations(
        copy / "iterations.csv", gpu, copy, seed=0, command=command,
        date=profile.date, gpu_name=profile.gpu_name, model=model, forward=forward,
    )  # fmt: skip
    for name in ("profile.yaml", "report.md"):
        diff = float_noise_diff((copy / name).read_text(), (shipped / name).read_text())
        assert diff is None, (
            f"{name} is stale ({diff}): cd {shipped.relative_to(ROOT)} && "
            f"{command.replace('OUT', '.')}"
        )
    # the compiled table says so in every term's origin; the eager one does not
    compiled = "torch.compile" in profile.terms["decode_iteration"].origin
    assert compiled == (shipped in COMPILED)
    assert profile.kind == "measured"
    assert profile.gpu_name == ("NVIDIA H200" if gpu == "h200" else "NVIDIA H100 80GB HBM3")
    assert profile.software["allreduce_in_steps"] == "no"
    run = pagesim.simulate(
        {
            "workload": {"num_requests": 20},
            "arrivals": {"rate_req_s": 2.0},
            "hardware": {"gpu": gpu, "model": model or "llama-2-7b",
                         "profile": shipped.name,
                         "tensor_parallel": int(shipped.name.split("-tp")[1].split("-")[0])
                         if shipped in SHARDS else 1},
        }
    )  # fmt: skip
    assert run.summary_frame["num_finished"].iloc[0] == 20


def test_the_gpu_script_without_pytorch_says_so():
    script = ROOT / "benchmarks" / "gpu_iterations.py"
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("PyTorch is installed here: the message for its absence cannot show")
    out = subprocess.run([sys.executable, str(script), "--device", "cpu"], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode != 0 and "needs PyTorch" in out.stderr


def test_a_repeat_is_compared_shape_by_shape(tmp_path):
    rows = [_row(batch=b, median_s=0.007 + 0.001 * b) for b in (1, 2, 4)]
    table = read_steps(_table(tmp_path / "it.csv", rows))
    again = [r | {"median_s": r["median_s"] * f} for r, f in zip(rows[:2], (1.1, 0.9), strict=True)]
    lines = repeat_section(table, read_steps(_table(tmp_path / "repeat.csv", again)))
    row = next(line for line in lines if line.startswith("| llama-2-7b |"))
    assert row == "| llama-2-7b | 1 | decode | 2 | 1.000 | 0.900–1.100 |"
    assert "1 shapes of the repeated models are not in the repeat." in lines
    # beside the table, fit_iterations adds it to the report
    _table(tmp_path / "repeat.csv", again)
    _, report = fit_iterations(
        _known_law_table(tmp_path / "it.csv", np.random.default_rng(5)), "h100-sxm",
        tmp_path / "out",
    )  # fmt: skip
    assert "## The same steps timed again" in report.read_text()


def test_steps_timed_without_all_reduce_get_them_added_at_tp_above_one():
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.costmodel.iteration import step_features as whole_step
    from pagesim.simulator.model_gpu_specs import get_gpu, get_model
    from pagesim.simulator.plan import BatchPlan

    model, gpu = get_model("llama-2-7b"), get_gpu("h100-sxm")
    plan = BatchPlan.from_lens(decode_context_lens=(512,) * 8)
    profile = load_profile(SHIPPED / "profile.yaml")
    assert profile.software["allreduce_in_steps"] == "no"
    term = profile.terms["decode_iteration"]
    for tp in (1, 2):
        cost = cost_model_for(SHIPPED.name, model, gpu, tensor_parallel=tp)
        f = whole_step(model, tp, plan)
        bare = term.time_s(f.bytes_, f.flops, f.blocks, f.seqs, f.tokens)
        allreduce = 2 * model.num_layers * cost.allreduce_time_s(plan.num_tokens)
        assert (allreduce > 0) == (tp > 1)
        assert cost.step_time_s(plan) == pytest.approx(bare + allreduce, rel=1e-9)
        assert ("analytic NVLink all-reduces added" in cost.description) == (tp > 1)
    # Splitwise's steps were timed on whole TP groups: nothing is added there
    split = cost_model_for("h100-sxm-splitwise", get_model("llama-2-70b"), gpu, tensor_parallel=4)
    assert "all-reduces inside the fitted steps" in split.description


@pytest.mark.parametrize(
    ("models", "message"),
    [(["nope-7b"], "unknown model 'nope-7b'"), (["opt-13b"], "not of the Llama architecture"),
     (["llama-2-7b@tp3"], "do not split 3 ways")],
)  # fmt: skip
def test_the_gpu_script_refuses_a_model_it_cannot_build_before_anything_else(models, message):
    script = ROOT / "benchmarks" / "gpu_iterations.py"
    out = subprocess.run([sys.executable, str(script), "--models", *models], capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode != 0 and message in out.stderr and "--models" in out.stderr


def test_pagesim_calibrate_steps_refuses_what_it_cannot_time_in_one_line():
    out = subprocess.run([sys.executable, "-m", "pagesim", "calibrate", "steps", "--models",
                          "opt-13b"], capture_output=True, text=True)  # fmt: skip
    assert out.returncode != 0
    assert "calibrate steps: --models: opt-13b is not of the Llama architecture" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_table_timed_both_ways_is_fitted_one_forward_at_a_time(tmp_path):
    rows = [_row(batch=b, attention=a, median_s=t) for b in (1, 2, 4, 8, 16)
            for a, t in (("eager", 0.008), ("compiled", 0.006))]  # fmt: skip
    rows += [_row(phase="prefill", batch=b, new_tokens=p, context=p, attention=a)
             for b in (1, 2) for p in (64, 256) for a in ("eager", "compiled")]  # fmt: skip
    table = _table(tmp_path / "both.csv", rows)
    with pytest.raises(DataError, match="give --forward eager or --forward compiled"):
        fit_iterations(table, "h100-sxm", tmp_path / "out")
    with pytest.raises(DataError, match="allowed"):
        fit_iterations(table, "h100-sxm", tmp_path / "out", forward="fused")
    profile_path, _ = fit_iterations(table, "h100-sxm", tmp_path / "out", forward="compiled")
    profile = load_profile(profile_path)
    assert profile.terms["decode_iteration"].num_points == 5
    assert "torch.compile" in profile.terms["decode_iteration"].origin
