"""What a run's numbers rest on, as ``RunResult.notes`` texts: requests lost, step costs.

Requests (``extra["num_dropped"]`` counts the requests the workload filters removed
before the run, ``Trace.dropped``): ``dropped_reasons`` and ``rejected_reasons`` (``"reason: count"``
joined by ``"; "``, most frequent first; at most ``MAX_REASONS`` distinct rejection
reasons are spelled out, the rest counted).

Step costs: ``cost_model`` is the profile's kind as the outputs name it (analytic,
measured here, measured elsewhere, projected, synthetic; a kind this table does not
know is shown as it is); ``cost_model_profile`` identifies the profile (the name or
path the spec gives, the GPU it describes, its date, and the first 12 hex digits of
the file's SHA-256; the analytic profile is named by its GPU);
``cost_model_description`` is :attr:`CostModel.description`. All are text, the same
for the same inputs, so ``results.csv`` stays deterministic.

Workload table: ``workload_table`` (only when a table workload read a table that is not
the one shipped with pagesim: one prepared into the data folder, an external dataset's,
or ``workload.path``) names it (``workloads.registry.table_origin``: file, SHA-256), its
row count and the provenance the table carries, so that a run on a 12-row table
prepared from a sample says so in ``results.csv`` and ``summary.md``.

Model and pool (only where they say something the spec does not): ``model`` when
``hardware.model`` is not the model's own name (a Hugging Face id or a config.json path:
the name the config gives, and its sliding window, which ``paged-v1`` does not drop
blocks for: ``simulator/hf_config.py``); ``kv_pool`` when the run named its server's
release (``ReleasePool.note``: the release, the blocks per GPU and every term).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pandas as pd

from pagesim.simulator.costmodel.model import CostModel
from pagesim.simulator.memory import KVPool
from pagesim.simulator.request import REJECTED
from pagesim.workloads.spec import WorkloadSpec
from pagesim.workloads.trace import Trace

MAX_REASONS = 3
#: Profile kinds (``profile.kind``) as the outputs name them.
KIND_TO_LABEL = {
    "analytic": "analytic",
    "measured": "measured here",
    "external": "measured elsewhere",
    "projected": "projected",
    "synthetic": "synthetic",
}


def reasons_text(reason_to_count: dict[str, int], limit: int | None = None) -> str:
    items = sorted(reason_to_count.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = items if limit is None else items[:limit]
    text = "; ".join(f"{reason}: {count}" for reason, count in shown)
    rest = items[len(shown) :]
    if rest:
        text += f"; {len(rest)} other reasons: {sum(c for _, c in rest)}"
    return text


def _file_tag(profile_ref: str) -> str:
    from pagesim.simulator.costmodel.factory import PROFILE_FILE_NAME, shipped_profiles_dir

    path = Path(profile_ref)
    if not path.is_file():
        folder = shipped_profiles_dir()
        path = folder / profile_ref / PROFILE_FILE_NAME if folder is not None else path
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    except OSError:
        return "file unreadable"


def step_cost_notes(cost_model: CostModel, profile_ref: str | None) -> dict[str, str]:
    """``cost_model``, ``cost_model_profile``, ``cost_model_description`` (module doc)."""
    profile = cost_model.profile
    label = KIND_TO_LABEL.get(profile.kind, profile.kind)
    if profile_ref is None:
        identity = f"analytic roofline of {cost_model.gpu.name}"
    else:
        date = f", {profile.date}" if profile.date else ""
        identity = f"{profile_ref} ({profile.gpu_name}{date}, {_file_tag(profile_ref)})"
    return {
        "cost_model": label,
        "cost_model_profile": identity,
        "cost_model_description": cost_model.description,
    }


def workload_table_notes(workload: WorkloadSpec, trace: Trace) -> dict[str, str]:
    """``workload_table`` (module doc), or nothing for a shipped table or no table."""
    from pagesim.workloads.registry import table_origin, table_rows

    origin = table_origin(workload.name, workload.path)
    if origin is None:
        return {}
    file, label = origin
    num_rows = table_rows(file)
    num_rows = trace.num_candidates if num_rows is None else num_rows
    rows = f": {num_rows:,} rows" if num_rows is not None else ""
    note = f"; {trace.source_note}" if trace.source_note else ""
    return {"workload_table": f"{workload.name}: {label}{rows}{note}"}


def request_notes(dropped: dict[str, int], requests: pd.DataFrame) -> dict[str, str]:
    """``dropped_reasons``, ``rejected_reasons`` (module doc)."""
    rejected = requests.loc[requests["status"] == REJECTED, "reason"]
    return {
        "dropped_reasons": reasons_text(dropped),
        "rejected_reasons": reasons_text(dict(Counter(rejected.tolist())), MAX_REASONS),
    }


def pool_notes(model_ref: str, pool: KVPool) -> dict[str, str]:
    """``model`` and ``kv_pool`` (module doc), each only where it applies."""
    notes = {}
    model = pool.model
    if model_ref != model.name or model.sliding_window is not None:
        window = (
            f"; sliding window {model.sliding_window:,} tokens on every layer, kept whole "
            "(full attention: an upper bound on memory past the window)"
            if model.sliding_window is not None
            else ""
        )
        notes["model"] = f"{model.name} (hardware.model {model_ref!r}){window}"
    if pool.release is not None:
        notes["kv_pool"] = pool.release.note()
    return notes
