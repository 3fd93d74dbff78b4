"""``pagesim calibrate import``: fit a profile on operator timings others measured on real GPUs.

Scenario: the user names Vidur's tables (``calibrate/vidur.py`` reads them) and where each
came from (repository and commit); the tables become rows of calibrate's measurement schema,
the *same* fit as a measured run (:func:`pagesim.calibrate.fit.fit_all`: relative NNLS,
20% of each term's points held out, seeded) gives each term and its held-out error, and
the profile and report are written. Nothing of the tables is written: the profile holds
coefficients and the report holds errors, both with the tables' provenance.

Labels. The profile's kind is ``external`` ("measured elsewhere"), never ``measured``;
``sources`` lists every table fitted (file name, repository, commit as the user gave
them, and the sha256 of the bytes read). The step overhead is a fitted term here: Vidur's
CPU-overhead table is the per-step Python work of the vLLM v0 engine it profiled (early
2024, Vidur's instrumented fork, Ray workers), and its origin says so.

Attention measured on another GPU (``attention_gpu`` differs from ``gpu``; e.g. an H100
profile from H100 GEMM tables and A100 attention tables) is fitted on its own GPU and
projected (:func:`~pagesim.simulator.costmodel.projection.project_profile`: bytes by the
HBM bandwidth ratio, FLOPs by the FP16 peak ratio); those terms' ``origin`` starts with
"projected", the cost model names them in every run's description, and their held-out
errors are the source GPU's fit, not a check on the target.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.calibrate import vidur
from pagesim.calibrate.fit import TermFit, fit_all
from pagesim.calibrate.report import PLOT_PNG, REPORT_MD, plot_fits
from pagesim.errors import ConfigError
from pagesim.files import atomic_write_text
from pagesim.simulator.costmodel.model import NEEDED_TERMS
from pagesim.simulator.costmodel.profile import Profile, Term, load_profile
from pagesim.simulator.costmodel.projection import project_profile
from pagesim.simulator.model_gpu_specs import GPUS

PROFILE_YAML = "profile.yaml"
TARGET_HELDOUT_MAPE = 0.05
ATTENTION_TERMS = ("prefill_attention", "paged_decode_attention")
#: Vidur's attention table has one block size (16), so a per-block cost cannot be told apart
#: from a per-byte one: decode attention is fitted on bytes and sequences only (a per-byte
#: coefficient is also what projection to another GPU rescales).
EXTRAS = {"paged_decode_attention": ("seqs",)}
ENGINE_ERA = (
    "early-2024 vLLM v0 engine as Vidur profiled it (its instrumented fork: Python scheduler, "
    "sampler, input preparation and output processing per step, workers as Ray actors)"
)


@dataclass(frozen=True)
class Source:
    """One table: its path, and where it came from (as the user says)."""

    path: Path
    repository: str
    commit: str

    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def as_dict(self) -> dict[str, str]:
        return {
            "file": self.path.name,
            "repository": self.repository,
            "commit": self.commit,
            "sha256": self.sha256(),
        }


@dataclass(frozen=True)
class VidurTables:
    """The tables of one import: attention (on ``attention_gpu``), GEMMs, CPU overheads."""

    gpu: str
    attention: tuple[Source, ...] = ()
    mlp: tuple[Source, ...] = ()
    cpu_overheads: tuple[Source, ...] = ()
    attention_gpu: str | None = None
    tensor_parallel: int = 1

    def __post_init__(self) -> None:
        for flag, name in (("--gpu", self.gpu), ("--attention-gpu", self.attention_gpu)):
            if name is not None and name not in GPUS:
                raise ConfigError(f"{flag}: {name!r} is not a known GPU; known: {sorted(GPUS)}")
        if not (self.attention or self.mlp or self.cpu_overheads):
            raise ConfigError(
                "calibrate import: give at least one table (--attention, --mlp, --cpu-overheads)"
            )

    @property
    def sources(self) -> tuple[Source, ...]:
        return self.attention + self.mlp + self.cpu_overheads

    @property
    def is_attention_projected(self) -> bool:
        return bool(self.attention) and (self.attention_gpu or self.gpu) != self.gpu


def parse_origins(pairs: Sequence[str], files: Sequence[Path]) -> dict[str, tuple[str, str]]:
    """``FILE=OWNER/REPO@COMMIT`` flags -> {file name: (repository, commit)}; every file needs one."""
    out: dict[str, tuple[str, str]] = {}
    for pair in pairs:
        name, sep, rest = pair.partition("=")
        repo, at, commit = rest.rpartition("@")
        if not sep or not at or not repo or not commit:
            raise ConfigError(
                f"--origin {pair!r}: expected FILE=OWNER/REPO@COMMIT, e.g. "
                "a100_cpu_overheads.csv=microsoft/vidur@6d98aa8"
            )
        out[Path(name).name] = (repo, commit)
    missing = [p.name for p in files if p.name not in out]
    if missing:
        raise ConfigError(
            f"--origin: no origin given for {missing[0]!r}; give FILE=OWNER/REPO@COMMIT for "
            f"every table ({[p.name for p in files]})"
        )
    return out


def measurement_rows(tables: VidurTables) -> pd.DataFrame:
    """Every table as rows of calibrate's measurement schema (plus ``source_file``)."""
    rows: list[dict] = []
    for src in tables.attention:
        rows += vidur.attention_rows(src.path)
    for src in tables.mlp:
        rows += vidur.mlp_rows(src.path) + vidur.pointwise_rows(src.path)
    for src in tables.cpu_overheads:
        rows += vidur.cpu_overhead_rows(src.path, tables.tensor_parallel)
    return pd.DataFrame(rows)


def _origin(term: str, df: pd.DataFrame, tables: VidurTables) -> str:
    files = sorted(df.loc[df["term"] == term, "source_file"].unique())
    what = f"fitted on {', '.join(files)}"
    if term == "step_overhead":
        what += f" (TP {tables.tensor_parallel} rows; CPU time of the host Vidur profiled on); {ENGINE_ERA}"
    return what


def describe_kernels(df: pd.DataFrame) -> str:
    """The operators each term was fitted on, e.g. ``paged_decode_attention: attn_decode (FLASH_ATTENTION, block 16)``."""
    parts = []
    for term, sub in df.groupby("term", sort=False):
        ops = ", ".join(sorted(sub["kernel"].unique()))
        if "backend" in sub and sub["backend"].notna().any():
            blocks = sorted(int(b) for b in sub["block_size"].dropna().unique())
            ops += f" ({', '.join(sorted(sub['backend'].dropna().unique()))}, block {blocks})"
        parts.append(f"{term}: {ops}")
    return "; ".join(parts)


def build_profile(
    tables: VidurTables, df: pd.DataFrame, fits: dict[str, TermFit], command: str, date: str
) -> Profile:
    gpu = GPUS[tables.gpu]
    terms = {name: fit.to_term(_origin(name, df, tables)) for name, fit in fits.items()}
    notes = [
        f"Fitted by `pagesim calibrate import` on {len(df)} operator timings measured by others on "
        "real GPUs (Vidur's Kineto medians), NOT measured by pagesim; terms are per layer.",
    ]
    if tables.is_attention_projected:
        src_gpu = GPUS[tables.attention_gpu]
        attn = Profile(
            kind="external",
            gpu_name=src_gpu.name,
            gpu_spec=src_gpu.name,
            terms={n: terms[n] for n in ATTENTION_TERMS if n in terms},
        )
        projected = project_profile(attn, gpu, src_gpu).terms
        ratio_bw = src_gpu.hbm_bw_bytes_s / gpu.hbm_bw_bytes_s
        ratio_fl = src_gpu.fp16_flops / gpu.fp16_flops
        for name, term in projected.items():
            origin = (
                f"projected from {src_gpu.name} ({term.origin}) by the HBM bandwidth ratio "
                f"x{ratio_bw:.3g} and the FP16 peak ratio x{ratio_fl:.3g} (const_s and per-item "
                f"coefficients kept as on {src_gpu.name}); its held-out error is the "
                f"{src_gpu.name} fit's, not a check on {gpu.name}"
            )
            terms[name] = Term(
                term.coefficients, term.heldout_mape, term.heldout_max_err, term.num_points, origin
            )
        notes.append(
            f"Attention terms {sorted(projected)} are PROJECTED from {src_gpu.name} timings "
            f"(no {gpu.name} attention table was given)."
        )
    if "step_overhead" in terms:
        notes.append(f"step_overhead: {ENGINE_ERA}.")
    missing = [name for name in NEEDED_TERMS if name not in terms]
    if missing:
        notes.append(
            f"Not in the tables: {missing} (the simulator fills them from its analytic profile)."
        )
    return Profile(
        kind="external",
        gpu_name=f"{gpu.name} (measured by others: {', '.join(sorted({s.repository for s in tables.sources}))})",
        gpu_spec=gpu.name,
        terms=terms,
        date=date,
        command=command,
        software={
            "source": "vidur operator profiles",
            "timer": "PyTorch Kineto (median)",
            "kernels": describe_kernels(df),
        },
        notes=" ".join(notes),
        sources=tuple(src.as_dict() for src in tables.sources),
    )


def render_report(
    profile: Profile,
    fits: dict[str, TermFit],
    seed: int,
    title: str = "External calibration report",
    kind_line: str = "fitted on timings measured by others on real GPUs, not by pagesim.",
) -> str:
    """The report of an imported (or whole-step) profile; the table of others' source
    files only where the profile has some."""
    sources = [
        "## Sources",
        "",
        "| file | repository | commit | sha256 |",
        "|---|---|---|---|",
        *(
            f"| {s['file']} | {s['repository']} | {s['commit']} | `{s['sha256']}` |"
            for s in profile.sources
        ),
        "",
    ]
    lines = [
        f"# {title}: {profile.gpu_spec}",
        "",
        f"Kind **{profile.kind}**: {kind_line}",
        "",
        f"- command: `{profile.command}`",
        f"- date: {profile.date}; fit seed {seed}; 20% of each term's points held out",
        "",
        *(sources if profile.sources else []),
        "## Fits (time_s = const_s + max(s_per_byte·bytes, s_per_flop·flops) + s_per_block·blocks + s_per_seq·seqs + s_per_token·tokens)",
        "",
        f"Target: held-out MAPE <= {TARGET_HELDOUT_MAPE:.0%} per term.",
        "",
        "| term | points | held-out MAPE | worst held-out | train MAPE | target met | coefficients |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, fit in fits.items():
        if profile.terms[name].is_projected:
            name = f"{name} (fitted on the source GPU's table, then projected)"
        mape = fit.heldout_mape
        met = "—" if mape is None else ("yes" if mape <= TARGET_HELDOUT_MAPE else "**no**")
        coefs = ", ".join(f"{k} {v:.3g}" for k, v in fit.coefficients.items())
        lines.append(
            f"| {name} | {fit.num_points} | {'—' if mape is None else f'{mape:.1%}'} | "
            f"{'—' if fit.heldout_max_err is None else f'{fit.heldout_max_err:.1%}'} | "
            f"{fit.train_mape:.1%} | {met} | {coefs} |"
        )
    lines += [
        "",
        "Coefficients above are the fit's; a projected term's coefficients in profile.yaml are "
        "rescaled to the target GPU.",
        "",
        "## Term origins",
        "",
    ]
    lines += [f"- **{name}**: {t.origin}" for name, t in profile.terms.items()]
    lines += ["", f"![predicted vs measured]({PLOT_PNG})", "", f"Notes: {profile.notes}", ""]
    return "\n".join(lines)


def write_profile_folder(
    out_dir: Path,
    profile: Profile,
    fits: dict[str, TermFit],
    report_text: str,
    plotted: dict[str, TermFit] | None = None,
) -> tuple[Path, Path]:
    """``profile.yaml`` (re-read against the simulator's schema), the predicted-vs-measured
    plot of ``plotted`` (default ``fits``) and ``report.md`` into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = profile.save(out_dir / PROFILE_YAML)
    load_profile(path)  # the simulator's schema accepts it
    plot_fits(fits if plotted is None else plotted, out_dir / PLOT_PNG)
    return path, atomic_write_text(out_dir / REPORT_MD, report_text)


def import_vidur(
    tables: VidurTables, out_dir: Path, seed: int = 0, command: str = "", date: str | None = None
) -> tuple[Path, Path]:
    """Fit ``tables`` and write ``profile.yaml``, ``report.md`` and the plot into ``out_dir``."""
    out_dir = Path(out_dir)
    df = measurement_rows(tables)
    fits = fit_all(df, np.random.default_rng(seed), EXTRAS)
    profile = build_profile(tables, df, fits, command, date or datetime.date.today().isoformat())
    labels = {
        (f"{n} (source GPU, projected)" if profile.terms[n].is_projected else n): fit
        for n, fit in fits.items()
    }
    return write_profile_folder(out_dir, profile, fits, render_report(profile, fits, seed), labels)


SPLITWISE_WHAT = (
    "whole engine iterations (all layers, LM head, all-reduces, sampling and the serving "
    "framework's per-step work), not operators"
)


def import_splitwise(
    source: Source,
    gpu: str,
    out_dir: Path,
    seed: int = 0,
    command: str = "",
    date: str | None = None,
) -> tuple[Path, Path]:
    """Fit an iteration-level profile on Splitwise's whole-iteration times of ``gpu``.

    Rows: :func:`pagesim.calibrate.splitwise.iteration_rows`; terms ``prefill_iteration``
    and ``decode_iteration`` (:mod:`pagesim.simulator.costmodel.iteration`), the same fit
    (:func:`fit_all`, 20% held out, seeded) and report as every import. The profile's other
    terms are absent: the simulator prices whole steps with these two and takes only block
    copies and swaps from the analytic profile.
    """
    from pagesim.calibrate import splitwise

    if gpu not in GPUS:
        raise ConfigError(f"--gpu: {gpu!r} is not a known GPU; known: {sorted(GPUS)}")
    out_dir = Path(out_dir)
    got = splitwise.iteration_rows(source.path, gpu)
    df = got.rows
    fits = fit_all(df, np.random.default_rng(seed))
    models = ", ".join(
        f"{m} TP {sorted(int(t) for t in df.loc[df['model'] == m, 'tensor_parallel'].unique())}"
        for m in sorted(df["model"].unique())
    )
    hardware = splitwise.GPU_TO_HARDWARE[gpu]
    terms = {
        name: fit.to_term(
            f"fitted on {source.path.name} (hardware {hardware}; {models}): {SPLITWISE_WHAT}"
        )
        for name, fit in fits.items()
    }
    notes = [
        f"Fitted by `pagesim calibrate import --splitwise` on {len(df)} whole-iteration times "
        f"measured by others on real GPUs (Splitwise's {hardware} rows: {models}), NOT measured "
        "by pagesim. Iteration-level profile: each step is priced as a whole by "
        "prefill_iteration or decode_iteration over the whole step's features on one GPU; "
        "block copies and swaps come from the analytic profile.",
    ]
    if got.skipped:
        notes.append(f"Rows not fitted: {'; '.join(got.skipped)}.")
    if got.other_hardware:
        notes.append(f"Other hardware in the file (not this GPU): {', '.join(got.other_hardware)}.")
    if len(got.below_peak):
        listed = ", ".join(
            f"{r['shape_id']} ({r['median_s'] * 1e3:.0f} ms < FP16-peak floor "
            f"{r['peak_floor_s'] * 1e3:.0f} ms)"
            for r in got.below_peak.to_dict("records")
        )
        notes.append(f"Prefill points faster than the FP16 peak allows, left out: {listed}.")
    profile = Profile(
        kind="external",
        gpu_name=f"{GPUS[gpu].name} (measured by others: {source.repository})",
        gpu_spec=gpu,
        terms=terms,
        date=date or datetime.date.today().isoformat(),
        command=command,
        software={
            "source": "splitwise whole-iteration times",
            "timer": "Splitwise's iteration timings (median over repeated rows)",
            "kernels": f"prefill_iteration, decode_iteration: {SPLITWISE_WHAT}",
        },
        notes=" ".join(notes),
        sources=(source.as_dict(),),
    )
    return write_profile_folder(out_dir, profile, fits, render_report(profile, fits, seed))
