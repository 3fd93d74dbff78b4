"""Logged vLLM KV pools (``kv_pool_points.tsv``) against pagesim's pool rules.

The file (tab-separated, one header line) has the columns :data:`COLUMNS`: the model (a
Hugging Face id), the GPU as the source names it, TP, the vLLM version as the source gives
it, ``gpu_memory_utilization``, the other settings in words, the logged GPU block count
(``4150 per GPU`` or ``18038``), the block size and the source. :func:`read_points` checks
every cell and names the file, the row and the field in a one-line DataError.

:func:`predict` sizes each row's pool: a row whose version is one pagesim models
(``server.vllm_version`` accepts it: 0.8.0 and later) by :func:`..simulator.vllm_pool.
release_pool`, with the settings the row's words give (``max_num_batched_tokens N``,
``max_num_seqs N``; vLLM's defaults otherwise: 2048 and 256 on GPUs under 70 GiB, 8192 and
1024 above, per docs/vllm_versions.md); older rows by pagesim's own rule without a release
(``memory.kv_pool``'s: v0.1's), the rule a run that names no release gets. The row's
``gpu_memory_utilization`` is used as given, except where :data:`CORRECTIONS` says why not.
``python -m pagesim.experiments.pool_points FILE`` prints the table of docs/vllm_versions.md.
"""

from __future__ import annotations

import csv
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pagesim.errors import ConfigError, DataError
from pagesim.simulator.model_gpu_specs import GIB, GPUS, GPUSpec, ModelSpec

COLUMNS = (
    "model", "gpu", "tp", "vllm_version", "gpu_memory_utilization", "settings", "gpu_blocks",
    "block_size", "source",
)  # fmt: skip

#: the source's GPU name -> pagesim's GPU, or a GPU pagesim's table lacks (memory only:
#: what CUDA reports, and whence)
GPU_NAMES = {
    "A100-40GB": "a100-40gb",
    "H100-80GB-HBM3": "h100-sxm",
    "H100-80GB": "h100-sxm",
    "RTX 4090 (24 GB)": "rtx-4090",
}
OTHER_GPUS = {
    # deviceQuery's "Global Memory: 25286672384 bytes" (GitHub Jumperkables/cuda-benchmarking,
    # 00_deviceQuery/README.md); vLLM's own log in vLLM issue #10517 says 23.58 GiB (0.1% more)
    "RTX 3090 (24 GB)": GPUSpec("rtx-3090", 25_286_672_384, 936e9, 71e12, 32e9, 56.25e9),
    # no CUDA figure found: the datasheet's 48 GB taken as 48 GiB, an upper bound
    "RTX A6000 (48 GB)": GPUSpec("rtx-a6000", 48 * GIB, 768e9, 154.8e12, 32e9, 56.25e9),
}

#: settings a row leaves out or gets wrong, (model, vllm_version) -> (settings, why);
#: ``gpu_memory_utilization`` None is the release's default
_INFERENCE_SIM = (
    "the server's exp-config.yaml in the same dataset (inference-sim/training @ed5c1d2, "
    "default_args/) gives max_num_seqs 128 and max_model_len 4096, which the row leaves out"
)
CORRECTIONS: dict[tuple[str, str], tuple[dict[str, float | int | None], str]] = {
    ("Qwen/Qwen3-14B", "0.23.0"): (
        {"gpu_memory_utilization": None},
        "the server ran with vLLM's defaults (`vllm serve --model Qwen/Qwen3-14B --port 8000`, "
        "the run's experiment_specs.md), and 0.23.0's default is 0.92 (config/cache.py, vLLM "
        "PR #38284), not the 0.90 the row assumes",
    ),
    ("meta-llama/Llama-2-70b-hf", "0.15.1"): ({"max_num_seqs": 128}, _INFERENCE_SIM),
    ("codellama/CodeLlama-34b-hf", "0.15.1"): ({"max_num_seqs": 128}, _INFERENCE_SIM),
    ("meta-llama/Llama-3.1-8B", "0.19.0"): (
        {"max_num_seqs": 256},
        "the run's meta.json (LLMServingSim @5daddb2) records max_num_seqs 256 and "
        "max_model_len 32768, which the row leaves out",
    ),
}

#: the context a v0 server took as ``max_model_len`` by default (the model's
#: ``max_position_embeddings``: OPT's configs 2,048; Meta-Llama-3-8B's config.json 8,192,
#: where Vidur's model_config.py says 4,096; the shipped configs' own for the others)
DEFAULT_CONTEXT = {"opt-125m": 2048, "opt-13b": 2048, "llama-3-8b": 8192}


@dataclass(frozen=True)
class PoolPoint:
    """One logged pool (module doc)."""

    row: int
    model: str
    gpu: str
    tensor_parallel: int
    vllm_version: str
    gpu_memory_utilization: float
    settings: str
    gpu_blocks: int
    block_size: int
    source: str

    @property
    def label(self) -> str:
        return f"{self.model}, {self.gpu}, TP {self.tensor_parallel}, vLLM {self.vllm_version}"

    def setting(self, name: str) -> int | None:
        """An integer setting the row's words give (``max_num_batched_tokens 8192``)."""
        match = re.search(rf"{name}\s+([\d,]+)", self.settings)
        return int(match.group(1).replace(",", "")) if match else None


def _int(text: str, where: str, field: str) -> int:
    match = re.match(r"^\s*([\d,]+)", text)
    if match is None:
        raise DataError(f"{where}: field {field!r} is not a count: {text!r}")
    return int(match.group(1).replace(",", ""))


def read_points(path: str | Path) -> list[PoolPoint]:
    """Every row of the file (module doc), checked cell by cell."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    rows = list(csv.reader(lines, delimiter="\t"))
    if not rows or tuple(rows[0]) != COLUMNS:
        raise DataError(f"{path}: the header must be {', '.join(COLUMNS)}")
    points = []
    for number, cells in enumerate(rows[1:], start=2):
        where = f"{path}: row {number}"
        if len(cells) != len(COLUMNS):
            raise DataError(f"{where}: {len(cells)} fields, expected {len(COLUMNS)}")
        cell = dict(zip(COLUMNS, cells, strict=True))
        try:
            util = float(cell["gpu_memory_utilization"])
        except ValueError:
            raise DataError(
                f"{where}: field 'gpu_memory_utilization' is not a number: "
                f"{cell['gpu_memory_utilization']!r}"
            ) from None
        if not 0 < util <= 1:
            raise DataError(f"{where}: field 'gpu_memory_utilization' must be in (0, 1]")
        if cell["gpu"] not in GPU_NAMES and cell["gpu"] not in OTHER_GPUS:
            raise DataError(f"{where}: field 'gpu': unknown GPU {cell['gpu']!r}")
        points.append(
            PoolPoint(
                number,
                cell["model"],
                cell["gpu"],
                _int(cell["tp"], where, "tp"),
                cell["vllm_version"],
                util,
                cell["settings"],
                _int(cell["gpu_blocks"], where, "gpu_blocks"),
                _int(cell["block_size"], where, "block_size"),
                cell["source"],
            )  # fmt: skip
        )
    return points


@dataclass(frozen=True)
class Prediction:
    """A row's predicted pool (GPU blocks, per GPU), how, and the terms."""

    point: PoolPoint
    num_gpu_blocks: int
    rule: str
    assumptions: tuple[str, ...]
    terms: tuple[tuple[str, float, str], ...]

    @property
    def error(self) -> float:
        """(predicted - logged) / logged."""
        return self.num_gpu_blocks / self.point.gpu_blocks - 1

    def describe(self) -> str:
        """The row, the numbers and every term, for a failing test."""
        terms = "; ".join(f"{name} {gib:.3f} GiB ({what})" for name, gib, what in self.terms)
        return (
            f"row {self.point.row} ({self.point.label}): logged {self.point.gpu_blocks:,}, "
            f"predicted {self.num_gpu_blocks:,} ({self.error:+.2%}) by {self.rule}; {terms}"
        )


def _gpu(point: PoolPoint) -> GPUSpec:
    return GPUS[GPU_NAMES[point.gpu]] if point.gpu in GPU_NAMES else OTHER_GPUS[point.gpu]


def _model(point: PoolPoint) -> ModelSpec:
    from pagesim.simulator.model_catalog import get_model

    return get_model(point.model)


def predict(point: PoolPoint) -> Prediction:
    """The pool pagesim gives the row (module doc)."""
    from pagesim.simulator.vllm_pool import release_pool
    from pagesim.simulator.vllm_releases import check_modelled

    model, gpu = _model(point), _gpu(point)
    fixed, why = CORRECTIONS.get((point.model, point.vllm_version), ({}, ""))
    assumptions = [f"{', '.join(f'{k} {v}' for k, v in fixed.items())}: {why}"] if fixed else []
    try:
        check_modelled(point.vllm_version)
    except ConfigError:
        return _legacy(point, model, gpu, tuple(assumptions))
    util = fixed.get("gpu_memory_utilization", point.gpu_memory_utilization)
    big = gpu.memory_bytes >= 70 * GIB
    settings = {}
    for name, default in (
        ("max_num_batched_tokens", 8192 if big else 2048),
        ("max_num_seqs", 1024 if big else 256),
    ):
        value = fixed.get(name, point.setting(name))
        if value is None:
            value = default
            assumptions.append(f"{name} {value} (vLLM's default on this GPU)")
        settings[name] = int(value)
    pool = release_pool(
        model, gpu, version=point.vllm_version, tensor_parallel=point.tensor_parallel,
        gpu_memory_utilization=util, block_size=point.block_size,
        total_memory_bytes=None if point.gpu in GPU_NAMES else gpu.memory_bytes, **settings,
    )  # fmt: skip
    return Prediction(
        point, pool.num_gpu_blocks, f"vLLM {point.vllm_version}'s rule (vllm_pool)",
        tuple(assumptions), tuple(pool.terms()),
    )  # fmt: skip


def _legacy(
    point: PoolPoint, model: ModelSpec, gpu: GPUSpec, assumptions: tuple[str, ...]
) -> Prediction:
    """pagesim's rule without a release (``memory.kv_pool``), per GPU, at the row's settings
    where the rule takes them; the row's version predates the first one pagesim models. The
    profiling pass of a v0 server without chunked prefill is ``max(max_model_len, 2048)``
    tokens (``max_model_len``: the row's, else the model's context, :data:`DEFAULT_CONTEXT`);
    the prototype before v0.1 profiled 2,560 tokens."""
    from pagesim.simulator.memory import activation_reserve_bytes

    tp, util = point.tensor_parallel, point.gpu_memory_utilization
    context = point.setting("max_model_len") or DEFAULT_CONTEXT.get(model.name)
    if context is None:
        context = _context_of_shipped_config(model.name)
    tokens = 2560 if point.vllm_version.startswith("pre-") else max(context, 2048)
    weights = model.weight_bytes / tp
    act = activation_reserve_bytes(model, tp, max_num_batched_tokens=tokens)
    usable = util * gpu.memory_bytes
    block = point.block_size * model.kv_bytes_per_token // tp
    blocks = int((usable - weights - act) // block)
    terms = (
        ("memory", gpu.memory_bytes / GIB, f"pagesim's {gpu.name} spec"),
        ("usable", usable / GIB, f"x gpu_memory_utilization {util}"),
        ("weights", weights / GIB, f"parameters / TP {tp}"),
        ("activations", act / GIB, f"activation_reserve_bytes at {tokens} tokens"),
    )
    return Prediction(
        point, blocks, "pagesim's rule without a release (v0.1's)",
        assumptions + (f"profiling pass of {tokens} tokens",), terms,
    )  # fmt: skip


def _context_of_shipped_config(name: str) -> int:
    from pagesim.simulator.hf_config import read_config
    from pagesim.simulator.model_catalog import CONFIG_DIR

    return int(read_config(CONFIG_DIR / f"{name}.json").get("max_position_embeddings", 2048))


def table(points: list[PoolPoint]) -> str:
    """The markdown table of docs/vllm_versions.md: logged, predicted, error, assumptions."""
    lines = [
        "| model, GPU, TP | vLLM | logged blocks | predicted | error | rule, assumptions |",
        "|---|---|---|---|---|---|",
    ]
    for point in points:
        p = predict(point)
        notes = "; ".join((p.rule, *p.assumptions))
        lines.append(
            f"| {point.model}, {point.gpu}, {point.tensor_parallel} | {point.vllm_version} | "
            f"{point.gpu_blocks:,} | {p.num_gpu_blocks:,} | {p.error:+.1%} | {notes} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(read_points(sys.argv[1])))
