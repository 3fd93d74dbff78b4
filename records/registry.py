"""The formats of real servers' records pagesim reads: one plain dict, and
:func:`read_run`, which recognises a run's format by its files.

Each entry of :data:`RECORD_FORMATS` is a :class:`RecordFormat`: the reader (a function
``(path, ...) -> MeasuredRun``, or to a :class:`~.steps.StepTable` for per-step
records), and the test that recognises the format's files. An entry is called as its
reader is: ``RECORD_FORMATS["blis-trace-v3"](folder, root=data)``. A new format is one
file (its reader, its ``recognises``) and one line here (``docs/plugins.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pagesim.errors import DataError
from pagesim.records import (
    bench_json,
    blis_trace,
    distserve_csv,
    distserve_exp,
    llmservingsim,
    lmbench,
    steps,
)
from pagesim.records.cells import read_text


@dataclass(frozen=True)
class RecordFormat:
    """A format of records: its reader and what recognises its files."""

    read: Callable[..., Any]
    #: True for a path (file or folder) in this format, from its name, suffix or first bytes
    recognises: Callable[[Path], bool]
    #: what a run holds: "per-request" (a MeasuredRun) or "per-step" (a StepTable)
    kind: str
    #: one line: whose format, and what a run of it looks like
    description: str

    def __call__(self, path: str | Path, *args: Any, **kwargs: Any) -> Any:
        return self.read(path, *args, **kwargs)


RECORD_FORMATS: dict[str, RecordFormat] = {
    "distserve-csv": RecordFormat(distserve_csv.read_distserve_csv, distserve_csv.recognises,
        "per-request", "DistServe's vLLM runs as CSV: vllm-N-RATE.csv"),
    "distserve-exp": RecordFormat(distserve_exp.read_distserve_exp, distserve_exp.recognises,
        "per-request", "DistServe's ground truth: distserve-[SETUP-]N-RATE.exp"),
    "vllm-bench-json": RecordFormat(bench_json.read_vllm_bench_json, bench_json.recognises,
        "per-request", "vllm bench serve --save-result --save-detailed: RESULT.json"),
    "llmservingsim": RecordFormat(llmservingsim.read_llmservingsim_run, llmservingsim.recognises,
        "per-request", "LLMServingSim's vLLM runs: a folder with (vllm/)requests.jsonl"),
    "blis-trace-v3": RecordFormat(blis_trace.read_blis_trace, blis_trace.recognises,
        "per-request", "llm-d inference-sim's BLIS trace v3: trace.yaml + trace.csv[.gz]"),
    "lmbench-csv": RecordFormat(lmbench.read_lmbench_csv, lmbench.recognises,
        "per-request", "LMBench's CSV (llm-d-benchmark): LMBench_*.csv[.gz]"),
    "step-parquet": RecordFormat(steps.read_step_parquet, steps.recognises,
        "per-step", "inference-sim's per-engine-step records: *.parquet"),
}  # fmt: skip


def format_of(path: str | Path) -> str:
    """The name of the one format that recognises ``path``; a one-line DataError naming
    the known formats when none does (after saying what is wrong with a file that is not
    readable text), or the formats when several do."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    found = [name for name, fmt in RECORD_FORMATS.items() if fmt.recognises(path)]
    if len(found) > 1:
        raise DataError(f"{path}: could be any of the formats {found}; read it with one's reader")
    if not found:
        if path.is_file():
            read_text(path)  # a binary, UTF-16, empty or broken-gzip file says so first
        known = "; ".join(f"{name} ({fmt.description})" for name, fmt in RECORD_FORMATS.items())
        raise DataError(f"{path}: not a run in a format pagesim reads; the formats: {known}")
    return found[0]


def read_run(path: str | Path, **kwargs: Any) -> Any:
    """The run at ``path`` read by its format's reader (:func:`format_of`); ``kwargs``
    go to the reader (``root=`` for a BLIS trace's name, ``dataset=``, ...)."""
    return RECORD_FORMATS[format_of(path)](path, **kwargs)
