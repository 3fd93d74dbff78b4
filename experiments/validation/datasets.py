"""The datasets ``pagesim validate-vllm`` knows, each recognised by its files.

A dataset reader is a module with ``NAME``, ``recognise(folder)``, ``prepare(folder,
out_dir) -> Study``, ``open_loop_rows(study, replays)``, ``goals(study, table)`` and
``sections(study, table, replays)`` (see :mod:`.distserve`); adding one is one module
and one line here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from pagesim.errors import DataError

#: dataset name -> the module that reads it
DATASETS = {
    "distserve_vllm_opt13b": "pagesim.experiments.validation.distserve",
    "llmservingsim_vllm019": "pagesim.experiments.validation.vllm019",
    "inference_sim_h100_v0151": "pagesim.experiments.validation.h100",
    "vllm_bench_runs": "pagesim.experiments.validation.own_runs",
    # every dataset of a shipped manifest (manifests/*.yaml): reader + manifest, no module
    "manifest": "pagesim.experiments.validation.generic",
}


def reader(name: str) -> ModuleType:
    return importlib.import_module(DATASETS[name])


def recognise(folder: Path) -> ModuleType:
    """The reader whose files ``folder`` holds; a one-line error naming what each expects."""
    if not folder.is_dir():
        raise DataError(f"--data {folder}: not a folder")
    for name in DATASETS:
        module = reader(name)
        if module.recognise(folder):
            return module
    raise DataError(
        f"--data {folder}: not a dataset pagesim knows ({', '.join(DATASETS)}): DistServe's "
        "vllm-N-RATE.csv runs, LLMServingSim's <GPU>/<model>/vllm/ runs beside workloads/, or "
        "inference-sim's <experiment>/results/stage_N_lifecycle_metrics.json, or your own vllm bench "
        "serve results beside a pagesim-runs.yaml (docs/your_server.md)"
    )
