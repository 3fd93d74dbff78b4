"""Whole engine steps timed on a GPU: the plan, the table, and the rows an iteration-level
profile is fitted on.

``pagesim calibrate steps`` (``calibrate/torch_steps.py``; ``benchmarks/gpu_iterations.py``
runs the same code from the sources) builds one GPU's shard of a model (random fp16
weights, every layer its own) and times whole forward passes, as a serving engine's step
runs them: every layer's RMSNorm, QKV, rotary, K/V write, attention (PyTorch's
``scaled_dot_product_attention``, FlashAttention where it takes the shape), output
projection, gated MLP, the final norm, the LM head over each sequence's last token and a
greedy pick. Each step is captured once as a CUDA graph and replayed (vLLM V1 replays
captured graphs; so the host's launch time is not in the times, as it is hidden there).
What it writes, one row per step shape (:data:`COLUMNS`):

- ``phase`` ``decode``: ``batch`` sequences each at ``context`` tokens, the last of them
  new (its K/V written in the step, the attention over all ``context``);
- ``phase`` ``prefill``: ``batch`` prompts of ``new_tokens`` tokens each, no cached
  prefix (``context`` = ``new_tokens``), causal attention;
- ``median_s``, ``iqr_s``, ``repeats``: the replays' CUDA-event times;
- ``attention``: the SDPA backend that ran (``flash_attention`` unless it refused), or,
  in a ``--compile`` table, which forward (``eager``, ``compiled``: :data:`FORWARDS`);
- ``tensor_parallel``: the shard's TP degree. One GPU holds one shard and does **no
  all-reduce**: a row with ``tensor_parallel`` > 1 is the step's compute on one GPU of
  the group, without the communication.

:func:`plan_steps` is the grid (shared by the GPU code and the tests); :func:`read_steps`
reads the table back with every cell checked; :func:`iteration_rows` turns the TP-1 rows
(or one model's rows at its TP) into ``prefill_iteration`` / ``decode_iteration``
measurement rows over the simulator's own step features (``costmodel.iteration``), as
Splitwise's whole-iteration times are (``splitwise.py``); :func:`fit_iterations` fits and
writes the profile, marked ``allreduce_in_steps: no`` so that at TP > 1 the simulator
adds the all-reduces (analytic, over the GPU's link).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibrate.tables import BATCH, POSITIVE_TOKENS, TP, read_table
from pagesim.errors import DataError
from pagesim.simulator.costmodel.iteration import (
    ALLREDUCE_KEY,
    uniform_decode_features,
    uniform_prefill_features,
)
from pagesim.simulator.model_gpu_specs import ModelSpec, get_model
from pagesim.simulator.plan import BatchPlan

COLUMNS = (
    "model",
    "tensor_parallel",
    "phase",
    "batch",
    "new_tokens",
    "context",
    "median_s",
    "iqr_s",
    "repeats",
    "attention",
)
PHASES = ("prefill", "decode")
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (128, 512, 1024, 2048, 4096)
PREFILL_BATCHES = (1, 2, 4)
PREFILL_LENGTHS = (16, 64, 256, 512, 1024, 2048, 4096)
#: the most tokens one step shape holds in its K/V cache (decode) or prefills at once:
#: keeps every shape inside an 80 GB GPU beside the weights of a 7B model or a 70B shard
MAX_KV_TOKENS = 65_536
MAX_PREFILL_TOKENS = 8_192
#: the models timed by default: the dense models of the H100 validation runs
#: (``pagesim validate-vllm --data inference_sim_h100_v0151``), each at its runs' TP
DEFAULT_MODELS = ("llama-2-7b@tp1", "codellama-34b@tp2", "llama-2-70b@tp4")


@dataclass(frozen=True)
class StepShape:
    phase: str
    batch: int
    new_tokens: int
    context: int

    @property
    def kv_tokens(self) -> int:
        return self.batch * self.context


def parse_model(entry: str) -> tuple[ModelSpec, int]:
    """``NAME`` or ``NAME@tpN`` -> (model spec, N); unknown names raise with the allowed ones."""
    name, sep, tp = entry.partition("@tp")
    if sep and not tp.isdigit():
        raise DataError(f"model entry {entry!r}: expected NAME or NAME@tpN")
    model = get_model(name)
    degree = int(tp) if sep else 1
    if model.num_heads % degree or model.num_kv_heads_per_gpu(degree) < 1:
        raise DataError(
            f"model entry {entry!r}: {model.num_heads} heads do not split {degree} ways"
        )
    return model, degree


def plan_steps(
    decode_batches=DECODE_BATCHES,
    decode_contexts=DECODE_CONTEXTS,
    prefill_batches=PREFILL_BATCHES,
    prefill_lengths=PREFILL_LENGTHS,
    max_kv_tokens: int = MAX_KV_TOKENS,
    max_prefill_tokens: int = MAX_PREFILL_TOKENS,
) -> list[StepShape]:
    """The step shapes, decode first (what serving steps mostly are), each phase in
    increasing size, the shapes over the token limits left out."""
    shapes = [
        StepShape("decode", b, 1, c)
        for b in decode_batches
        for c in decode_contexts
        if b * c <= max_kv_tokens
    ]
    shapes += [
        StepShape("prefill", b, p, p)
        for b in prefill_batches
        for p in prefill_lengths
        if b * p <= max_prefill_tokens
    ]
    return shapes


def read_steps(path: Path) -> pd.DataFrame:
    """The table ``benchmarks/gpu_iterations.py`` wrote, every cell checked."""
    df = read_table(
        path,
        COLUMNS,
        "benchmarks/gpu_iterations.py's output",
        integers={
            "tensor_parallel": TP,
            "batch": BATCH,
            "new_tokens": POSITIVE_TOKENS,
            "context": POSITIVE_TOKENS,
            "repeats": BATCH,
        },
        numbers=("median_s", "iqr_s"),
    )
    line = lambda i: f"{path}: line {int(i) + 2}"  # noqa: E731 - line 1 is the header
    bad = ~df["phase"].isin(PHASES)
    if bad.any():
        i = np.flatnonzero(bad)[0]
        raise DataError(f"{line(i)}: phase {df['phase'].iloc[i]!r} is not one of {list(PHASES)}")
    times = df["median_s"].to_numpy(dtype=float)
    bad = ~(np.isfinite(times) & (times > 0))
    if bad.any():
        raise DataError(f"{line(np.flatnonzero(bad)[0])}: median_s must be a positive time")
    for i, name in enumerate(df["model"]):
        try:
            get_model(str(name))
        except Exception as exc:  # noqa: BLE001 - the catalogue's own message names the known ones
            raise DataError(f"{line(i)}: model {name!r}: {exc}") from None
    return df


@dataclass(frozen=True)
class StepRows:
    """Measurement rows to fit (TP 1) and the rows left out, each with its reason."""

    rows: pd.DataFrame
    left_out: tuple[str, ...]


def _row(term: str, r, feats) -> dict:
    shape_id = f"{r.phase}-{r.model}-tp{r.tensor_parallel}-b{r.batch}-c{r.context}"
    params = {
        "model": r.model,
        "tp": int(r.tensor_parallel),
        "batch": int(r.batch),
        "new_tokens": int(r.new_tokens),
        "context": int(r.context),
    }
    return {
        "term": term,
        "kernel": "whole_iteration",
        "shape_id": shape_id,
        "params_json": json.dumps(params, sort_keys=True),
        "batch": int(r.batch),
        "block_size": None,
        "num_heads": None,
        "num_kv_heads": None,
        "head_dim": None,
        "mean_context": int(r.context),
        "max_context": int(r.context),
        **feats.as_dict(),
        "median_s": float(r.median_s),
        "iqr_s": float(r.iqr_s),
        "model": r.model,
        "tensor_parallel": int(r.tensor_parallel),
    }


def step_features(r):
    """The simulator's features of one table row's step (one GPU of its TP group)."""
    model = get_model(str(r.model))
    tp = int(r.tensor_parallel)
    if r.phase == "prefill":
        return uniform_prefill_features(model, tp, int(r.batch), int(r.new_tokens))
    return uniform_decode_features(model, tp, int(r.batch), int(r.context))


def iteration_rows(df: pd.DataFrame, model: str | None = None) -> StepRows:
    """``prefill_iteration`` and ``decode_iteration`` rows (module doc): of the TP-1 steps,
    or, with ``model``, of that model's steps at whatever TP they were timed (a shard's
    steps hold no all-reduce; the profile says so and the simulator adds them)."""
    if model is not None and model not in set(df["model"]):
        raise DataError(
            f"--model {model!r}: no step of it in the table; present: {sorted(set(df['model']))}"
        )
    rows, left_out = [], []
    for r in df.itertuples(index=False):
        if (r.model != model) if model is not None else int(r.tensor_parallel) > 1:
            continue
        term = "prefill_iteration" if r.phase == "prefill" else "decode_iteration"
        rows.append(_row(term, r, step_features(r)))
    others = df[df["model"] != model] if model is not None else df[df["tensor_parallel"] > 1]
    for (name, tp), sub in others.groupby(["model", "tensor_parallel"], sort=True):
        left_out.append(
            f"{name} TP {tp}: {len(sub)} steps "
            + (
                "of another model"
                if model is not None
                else "of one GPU's shard without the all-reduce (not fitted here: --model "
                "fits a model's shard)"
            )
        )
    if not rows:
        raise DataError(
            "no TP-1 step in the table: give --model NAME to fit a model's shard steps (the "
            "simulator adds their all-reduces)"
        )
    return StepRows(pd.DataFrame(rows), tuple(left_out))


#: the shipped H100 profiles a step table is set beside (name, profile reference)
REFERENCE_PROFILES = (("kernels (h100-sxm-vidur)", "h100-sxm-vidur"), ("analytic", None))


def plan_of(r) -> BatchPlan:
    """The simulator's plan of one table row's step."""
    if r.phase == "prefill":
        return BatchPlan.from_lens(prefill_new_lens=(int(r.new_tokens),) * int(r.batch))
    return BatchPlan.from_lens(decode_context_lens=(int(r.context),) * int(r.batch))


def gpu_price_s(cost, r) -> float:
    """A profile's price of a row's step without the host's per-step overhead and the
    all-reduces (what one GPU computes: the table's rows hold no more)."""
    plan = plan_of(r)
    tokens = plan.num_tokens
    t = cost.summed_step_time_s(plan) - cost.step_overhead_time_s(plan.num_seqs, tokens)
    return t - 2 * cost.model.num_layers * cost.allreduce_time_s(tokens)


def priced_section(df: pd.DataFrame, gpu: str) -> list[str]:
    """Each shipped profile's GPU price of the table's steps against the measured times:
    per model, TP and phase, the median and range of price / measured."""
    from pagesim.simulator.costmodel.factory import cost_model_for
    from pagesim.simulator.model_gpu_specs import get_gpu

    lines = [
        "## The shipped profiles' price of the same steps",
        "",
        "Each profile prices every step of the table as the simulator would, without the "
        "host's per-step overhead (`step_overhead`) and without the all-reduces (the table's "
        "steps hold neither: CUDA-graph replays on one GPU). Ratio: price / measured.",
        "",
        "| model | TP | phase | steps | measured ms (min–max) | "
        + " | ".join(f"{name}: median ratio (range)" for name, _ in REFERENCE_PROFILES)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(REFERENCE_PROFILES),
    ]
    models = {}
    for (model, tp, phase), sub in df.groupby(["model", "tensor_parallel", "phase"], sort=True):
        cells = []
        for _, ref in REFERENCE_PROFILES:
            key = (ref, model, int(tp))
            if key not in models:
                models[key] = cost_model_for(
                    ref, get_model(model), get_gpu(gpu), tensor_parallel=int(tp), with_serving=False
                )
            cost = models[key]
            ratio = np.array(
                [gpu_price_s(cost, r) / r.median_s for r in sub.itertuples(index=False)]
            )
            cells.append(f"{np.median(ratio):.2f} ({ratio.min():.2f}–{ratio.max():.2f})")
        ms = sub["median_s"].to_numpy(dtype=float) * 1e3
        lines.append(
            f"| {model} | {tp} | {phase} | {len(sub)} | {ms.min():.2f}–{ms.max():.2f} | "
            + " | ".join(cells)
            + " |"
        )
    return lines + [""]


#: a second run of the same plan beside the table (another machine, another day): the
#: report compares the two shape by shape
REPEAT_CSV = "repeat.csv"
KEYS = ["model", "tensor_parallel", "phase", "batch", "new_tokens", "context"]


def repeat_section(table: pd.DataFrame, repeat: pd.DataFrame) -> list[str]:
    """The repeat's time over the table's, per shape both timed: how far a second run of
    the same steps moves (a fit on either would differ by about this much)."""
    both = table.merge(repeat, on=KEYS, suffixes=("", "_repeat"))
    lines = [
        "## The same steps timed again",
        "",
        f"`{REPEAT_CSV}` beside the table: the same plan run again on a fresh machine. "
        "Ratio: repeat / table, per shape timed in both.",
        "",
        "| model | TP | phase | shapes | median ratio | range |",
        "|---|---|---|---|---|---|",
    ]
    for (model, tp, phase), sub in both.groupby(["model", "tensor_parallel", "phase"], sort=True):
        r = sub["median_s_repeat"].to_numpy(dtype=float) / sub["median_s"].to_numpy(dtype=float)
        lines.append(
            f"| {model} | {tp} | {phase} | {len(sub)} | {np.median(r):.3f} | "
            f"{r.min():.3f}–{r.max():.3f} |"
        )
    runs = repeat[["model", "tensor_parallel"]].drop_duplicates()
    missing = len(table.merge(runs, on=["model", "tensor_parallel"])) - len(both)
    if missing:
        lines += ["", f"{missing} shapes of the repeated models are not in the repeat."]
    return lines + [""]


#: the ``attention`` labels of a ``--compile`` table: each shape timed both ways
FORWARDS = ("eager", "compiled")


def one_forward(table: pd.DataFrame, forward: str | None, path: Path) -> pd.DataFrame:
    """The rows of one forward: a ``--compile`` table times each shape twice (``eager``,
    ``compiled``), and fitting both at once would fit two laws as one; ``forward`` picks."""
    labels = set(table["attention"].astype(str)) & set(FORWARDS)
    if forward is not None and forward not in FORWARDS:
        raise DataError(f"--forward {forward!r}: allowed: {list(FORWARDS)}")
    if forward is None:
        if len(labels) > 1:
            raise DataError(
                f"{path}: each shape is timed both {' and '.join(FORWARDS)} (a --compile "
                "table): give --forward eager or --forward compiled"
            )
        return table
    if forward not in labels:
        raise DataError(f"{path}: no {forward!r} rows (attention column: {sorted(labels)})")
    return table[table["attention"] == forward].reset_index(drop=True)


def fit_iterations(
    path: Path,
    gpu: str,
    out_dir: Path,
    seed: int = 0,
    command: str = "",
    date: str | None = None,
    gpu_name: str | None = None,
    model: str | None = None,
    forward: str | None = None,
) -> tuple[Path, Path]:
    """Fit an iteration-level profile (kind ``measured``) on a step table's TP-1 rows (or
    ``model``'s rows at its TP: :func:`iteration_rows`), with
    the same fit and hold-out as every calibration (``fit_all``, 20% held out, seeded);
    write ``profile.yaml``, ``report.md`` (the fit, the rows left out, and
    :func:`priced_section`) and the predicted-vs-measured plot into ``out_dir``."""
    import datetime

    from pagesim.calibrate.external import render_report, write_profile_folder
    from pagesim.calibrate.fit import fit_all
    from pagesim.errors import ConfigError
    from pagesim.simulator.costmodel.profile import Profile
    from pagesim.simulator.model_gpu_specs import GPUS

    if gpu not in GPUS:
        raise ConfigError(f"--gpu: {gpu!r} is not a known GPU; known: {sorted(GPUS)}")
    path = Path(path)
    table = one_forward(read_steps(path), forward, path)
    got = iteration_rows(table, model)
    df = got.rows
    fits = fit_all(df, np.random.default_rng(seed))
    models = ", ".join(sorted(df["model"].unique()))
    compiled = set(table["attention"].astype(str)) == {"compiled"}
    forward = (
        "a PyTorch forward with its layer through torch.compile"
        if compiled
        else ("a PyTorch forward")
    )
    tps = ", ".join(str(t) for t in sorted(df["tensor_parallel"].unique()))
    shard = "" if tps == "1" else ", one GPU's shard, without the all-reduces the simulator adds"
    what = (
        f"whole steps of {models} at TP {tps} timed by benchmarks/gpu_iterations.py on this "
        f"GPU (CUDA-graph replays of {forward}: every layer, LM head, greedy pick; no host "
        f"time{shard})"
    )
    terms = {name: fit.to_term(f"fitted on {path.name}: {what}") for name, fit in fits.items()}
    notes = [
        f"Fitted by `pagesim calibrate iterations` on {len(df)} whole steps ({what}). "
        "Iteration-level profile: each step is priced as a whole by prefill_iteration or "
        "decode_iteration over the step's features on one GPU; block copies and swaps come "
        "from the analytic profile. The host's per-step work is not in these times (the "
        "engine hides it behind the GPU where it replays graphs), so none is priced.",
    ]
    if got.left_out:
        notes.append(f"Not fitted: {'; '.join(got.left_out)}.")
    attention = sorted(table["attention"].astype(str).unique())
    profile = Profile(
        kind="measured",
        gpu_name=gpu_name or GPUS[gpu].name,
        gpu_spec=gpu,
        terms=terms,
        date=date or datetime.date.today().isoformat(),
        command=command,
        software={
            "source": "benchmarks/gpu_iterations.py whole-step times",
            "timer": "CUDA events around CUDA-graph replays (median)",
            "attention": ", ".join(attention),
            ALLREDUCE_KEY: "no",
        },
        notes=" ".join(notes),
    )
    text = render_report(
        profile,
        fits,
        seed,
        title="Whole-step calibration report",
        kind_line=f"whole steps timed by pagesim's `benchmarks/gpu_iterations.py` on "
        f"{profile.gpu_name} (table `{path.name}`).",
    )
    text += "\n".join(priced_section(table, gpu)) + "\n"
    repeat = path.with_name(REPEAT_CSV)
    if repeat.is_file():
        text += "\n".join(repeat_section(table, read_steps(repeat))) + "\n"
    return write_profile_folder(out_dir, profile, fits, text)
