"""The profile file: fitted (or analytic) cost terms for one GPU. This module owns its schema.

``calibrate`` writes profiles (it may import this module); the simulator reads them.
A profile is YAML::

    schema_version: 1
    kind: measured            # measured | external | analytic | projected | synthetic (test data)
    gpu_name: NVIDIA H200     # as the device reports it (analytic: the spec's name)
    gpu_spec: h200            # key of simulator.model_gpu_specs.GPUS, used for projection
    date: '2026-11-21'
    command: pagesim calibrate --model opt-13b --out ...
    software: {cupy: 13.6.0, cuda_runtime: '13000', driver: '580.65'}
    dtype: float16
    notes: free text (what was measured, caveats; for projected: from which profile)
    sources:                  # external profiles: the tables fitted, as the user named them
      - {file: a100_cpu_overheads.csv, repository: microsoft/vidur, commit: 6d98aa8, sha256: ...}
    terms:
      gemm:                   # one term per kernel family, see TERM_NAMES
        coefficients: {const_s: 4.1e-06, s_per_byte: 2.6e-13, s_per_flop: 1.5e-15}
        heldout_mape: 0.021   # mean |pred - meas| / meas on held-out points (null: not fitted)
        heldout_max_err: 0.07 # worst |pred - meas| / meas on held-out points
        num_points: 240       # measurements the term was fitted and validated on
        origin: ...           # optional: where this term comes from, when not from the profile's
                              # own measurements (e.g. "projected from a100-80gb by HBM ratio")
      ...
    serving:                  # optional: the serving path outside the kernels (.serving)
      form: seq_ctx
      coefficients: {const_s: 2.1e-3, s_per_seq: 3.0e-4, s_per_context_token: 4.0e-7}
      frontend_delay_s: 0.012
      ...

Kinds: ``measured`` = timed by ``pagesim calibrate`` on this GPU; ``external`` = fitted by
``pagesim calibrate import`` on timings others measured on real GPUs (never labelled
pagesim-measured; ``sources`` says which tables, from where, with their sha256);
``analytic`` = the roofline of a datasheet; ``projected`` = another GPU's profile rescaled;
``synthetic`` = test data, not a GPU.

An *iteration-level* profile (fitted on whole-iteration timings, e.g. Splitwise's) has the
terms ``prefill_iteration`` and ``decode_iteration``, whose features are a whole step's on one
GPU, all layers (:mod:`.iteration`); the simulator then prices each step with one of them.

Every term has the same *roofline-plus-linear* form over physical features
(:class:`~pagesim.simulator.costmodel.features.Features`)::

    time_s = const_s + max(s_per_byte * bytes, s_per_flop * flops)
             + s_per_block * blocks + s_per_seq * seqs + s_per_token * tokens

so each coefficient means something: 1 / s_per_byte is an achieved bandwidth,
1 / s_per_flop an achieved FLOP rate, s_per_block a per-block overhead. Missing
coefficients are 0. Terms are per kernel launch (one layer); the cost model
multiplies by the number of layers.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pagesim.errors import ConfigError
from pagesim.files import atomic_write_text
from pagesim.simulator.costmodel.serving import ServingPath, serving_from_dict

SCHEMA_VERSION = 1

PROFILE_KINDS = ("measured", "external", "analytic", "projected", "synthetic")

#: The keys of one entry of ``sources`` (all strings).
SOURCE_KEYS = ("file", "repository", "commit", "sha256")

#: The kernel families a profile may describe.
TERM_NAMES = (
    "gemm",  # one linear layer (cuBLAS GEMM): tokens x in_features @ in_features x out_features
    "prefill_attention",  # causal attention over the prompt tokens of the step
    "paged_decode_attention",  # one query token per sequence over a block table
    "contiguous_decode_attention",  # the same over a contiguous cache (baseline)
    "kv_write",  # reshape_and_cache: scatter the step's new K/V into their slots
    "block_copy",  # copy-on-write block copies (all layers' K and V of one block)
    "swap",  # GPU<->CPU block transfers over PCIe
    "step_overhead",  # per-step cost (scheduling, launch, sampling): const_s, s_per_seq, s_per_token
    "pointwise",  # one layer's element-wise kernels (norms, activation, residual add, rotary)
    "mixed_decode_attention",  # the extra time of a step's decodes sharing a call with prompt chunks
    "prefill_iteration",  # a whole step that prefills, all layers (iteration-level profiles)
    "decode_iteration",  # a whole step that only decodes, all layers (iteration-level profiles)
)

COEFFICIENT_NAMES = (
    "const_s",
    "s_per_byte",
    "s_per_flop",
    "s_per_block",
    "s_per_seq",
    "s_per_token",
)


@dataclass(frozen=True)
class Term:
    """One fitted cost term (see the module docstring for its form)."""

    coefficients: dict[str, float]
    heldout_mape: float | None = None
    heldout_max_err: float | None = None
    num_points: int = 0
    origin: str = ""
    #: predicted / measured - 1 on the held-out points, at ``serving.RESIDUAL_QUANTILES``
    #: (where the fit kept them): what an interval draws this term's multiplier from
    heldout_residual_quantiles: tuple[float, ...] | None = None

    @property
    def is_projected(self) -> bool:
        return self.origin.startswith("projected")

    def coef(self, name: str) -> float:
        return self.coefficients.get(name, 0.0)

    def time_s(
        self,
        bytes_: float = 0.0,
        flops: float = 0.0,
        blocks: float = 0.0,
        seqs: float = 0.0,
        tokens: float = 0.0,
    ) -> float:
        c = self.coefficients.get
        return (
            c("const_s", 0.0)
            + max(c("s_per_byte", 0.0) * bytes_, c("s_per_flop", 0.0) * flops)
            + c("s_per_block", 0.0) * blocks
            + c("s_per_seq", 0.0) * seqs
            + c("s_per_token", 0.0) * tokens
        )


@dataclass(frozen=True)
class IntervalCalibration:
    """The conformal factor of a profile's intervals (``intervals:`` in the YAML)."""

    nominal: float
    factor: float
    sources: tuple[str, ...]
    replicates: int
    fitted_on: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "nominal": float(self.nominal),
            "factor": float(self.factor),
            "sources": list(self.sources),
            "replicates": int(self.replicates),
            "fitted_on": self.fitted_on,
        }


def _intervals(doc: Any, fail) -> IntervalCalibration:
    keys = ("nominal", "factor", "sources", "replicates", "fitted_on")
    if not isinstance(doc, dict) or sorted(doc) != sorted(keys):
        raise fail(f"intervals: must be a mapping with exactly the keys {list(keys)}")
    nominal, factor, replicates = doc["nominal"], doc["factor"], doc["replicates"]
    if isinstance(nominal, bool) or not isinstance(nominal, float | int) or not 0 < nominal < 1:
        raise fail(f"intervals.nominal: must be a number in (0, 1), got {nominal!r}")
    if (
        isinstance(factor, bool)
        or not isinstance(factor, float | int)
        or not math.isfinite(factor)
        or factor < 0
    ):
        raise fail(f"intervals.factor: must be a finite number >= 0, got {factor!r}")
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 2:
        raise fail(f"intervals.replicates: must be an integer >= 2, got {replicates!r}")
    sources = doc["sources"]
    if not isinstance(sources, list) or not all(isinstance(x, str) for x in sources):
        raise fail("intervals.sources: must be a list of names")
    return IntervalCalibration(
        float(nominal), float(factor), tuple(sources), int(replicates), str(doc["fitted_on"])
    )


@dataclass(frozen=True)
class Profile:
    kind: str
    gpu_name: str
    gpu_spec: str
    terms: dict[str, Term]
    date: str = ""
    command: str = ""
    software: dict[str, str] = field(default_factory=dict)
    dtype: str = "float16"
    notes: str = ""
    sources: tuple[dict[str, str], ...] = ()
    schema_version: int = SCHEMA_VERSION
    #: the serving path outside the kernels (None: the kernels' time only)
    serving: ServingPath | None = None
    #: how this profile's intervals are widened to their nominal coverage, and on what
    #: real runs that was fitted (``pagesim validate-vllm``; docs/intervals.md)
    intervals: IntervalCalibration | None = None

    def term(self, name: str) -> Term:
        try:
            return self.terms[name]
        except KeyError:
            raise ConfigError(
                f"profile for {self.gpu_name!r} has no term {name!r}; it has {sorted(self.terms)}"
            ) from None

    @property
    def projected_terms(self) -> list[str]:
        """Terms whose ``origin`` says they were projected from another GPU."""
        return [name for name, t in self.terms.items() if t.is_projected]

    def with_terms(self, **changes: Any) -> Profile:
        return replace(self, **changes)

    # ---- YAML -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "gpu_name": self.gpu_name,
            "gpu_spec": self.gpu_spec,
            "date": self.date,
            "command": self.command,
            "software": dict(self.software),
            "dtype": self.dtype,
            "notes": self.notes,
            "terms": {
                name: {
                    "coefficients": {k: float(v) for k, v in t.coefficients.items()},
                    "heldout_mape": t.heldout_mape,
                    "heldout_max_err": t.heldout_max_err,
                    "num_points": int(t.num_points),
                    **({"origin": t.origin} if t.origin else {}),
                    **(
                        {
                            "heldout_residual_quantiles": [
                                float(q) for q in t.heldout_residual_quantiles
                            ]
                        }
                        if t.heldout_residual_quantiles is not None
                        else {}
                    ),
                }
                for name, t in self.terms.items()
            },
        }
        if self.sources:
            doc["sources"] = [dict(src) for src in self.sources]
        if self.serving is not None:
            doc["serving"] = self.serving.to_dict()
        if self.intervals is not None:
            doc["intervals"] = self.intervals.to_dict()
        return doc

    def save(self, path: str | Path) -> Path:
        import yaml  # only here: a run that loads no YAML does not import it

        return atomic_write_text(path, yaml.safe_dump(self.to_dict(), sort_keys=False))


def profile_from_dict(doc: Any, source: str = "<profile>") -> Profile:
    """Build a Profile from parsed YAML, rejecting unknown keys and wrong types by name."""

    def fail(msg: str) -> ConfigError:
        return ConfigError(f"{source}: {msg}")

    if not isinstance(doc, dict):
        raise fail("a profile must be a mapping")
    allowed = {
        "schema_version",
        "kind",
        "gpu_name",
        "gpu_spec",
        "date",
        "command",
        "software",
        "dtype",
        "notes",
        "sources",
        "terms",
        "serving",
        "intervals",
    }
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r}; allowed keys: {sorted(allowed)}")
    for key in ("kind", "gpu_name", "gpu_spec", "terms"):
        if key not in doc:
            raise fail(f"missing key {key!r}")
    version = doc.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise fail(
            f"schema_version {doc.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})"
        )
    if doc["kind"] not in PROFILE_KINDS:
        raise fail(f"kind: {doc['kind']!r} is not one of {list(PROFILE_KINDS)}")
    for key in ("gpu_name", "gpu_spec", "command", "dtype", "notes"):
        if key in doc and not isinstance(doc[key], str):
            raise fail(f"{key}: must be a string, got {doc[key]!r}")
    if "date" in doc and not isinstance(doc["date"], str | datetime.date):
        raise fail(f"date: must be a date string like '2026-11-21', got {doc['date']!r}")
    if not isinstance(doc["terms"], dict):
        raise fail("terms must be a mapping")
    terms = {name: _term_from_dict(name, t, fail) for name, t in doc["terms"].items()}
    software = doc.get("software") or {}
    if not isinstance(software, dict):
        raise fail("software must be a mapping")
    return Profile(
        kind=str(doc["kind"]),
        gpu_name=str(doc["gpu_name"]),
        gpu_spec=str(doc["gpu_spec"]),
        terms=terms,
        date=str(doc.get("date", "")),
        command=str(doc.get("command", "")),
        software={str(k): str(v) for k, v in software.items()},
        dtype=str(doc.get("dtype", "float16")),
        notes=str(doc.get("notes", "")),
        sources=_sources(doc.get("sources", []), fail),
        serving=None if doc.get("serving") is None else serving_from_dict(doc["serving"], fail),
        intervals=None if doc.get("intervals") is None else _intervals(doc["intervals"], fail),
    )


def _term_from_dict(name: str, t: Any, fail) -> Term:
    """One entry of ``terms``, checked key by key."""
    where = f"terms.{name}"
    if name not in TERM_NAMES:
        raise fail(f"{where}: unknown term; allowed terms: {list(TERM_NAMES)}")
    if not isinstance(t, dict) or not isinstance(t.get("coefficients"), dict):
        raise fail(f"{where}: expected a mapping with 'coefficients'")
    extra = sorted(
        set(t)
        - {
            "coefficients",
            "heldout_mape",
            "heldout_max_err",
            "num_points",
            "origin",
            "heldout_residual_quantiles",
        }
    )
    if extra:
        raise fail(f"{where}: unknown key {extra[0]!r}")
    coefs: dict[str, float] = {}
    for cname, value in t["coefficients"].items():
        if cname not in COEFFICIENT_NAMES:
            raise fail(f"{where}.coefficients.{cname}: unknown; allowed: {list(COEFFICIENT_NAMES)}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise fail(f"{where}.coefficients.{cname}: must be a finite number >= 0, got {value!r}")
        coefs[cname] = float(value)
    for key in ("heldout_mape", "heldout_max_err"):
        v = t.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise fail(f"{where}.{key}: must be a number or null, got {v!r}")
    num_points = t.get("num_points", 0)
    if isinstance(num_points, bool) or not isinstance(num_points, int) or num_points < 0:
        raise fail(f"{where}.num_points: must be an integer >= 0, got {num_points!r}")
    return Term(
        coefficients=coefs,
        heldout_mape=None if t.get("heldout_mape") is None else float(t["heldout_mape"]),
        heldout_max_err=None if t.get("heldout_max_err") is None else float(t["heldout_max_err"]),
        num_points=num_points,
        origin=_string(t.get("origin", ""), f"{where}.origin", fail),
        heldout_residual_quantiles=_quantiles(t.get("heldout_residual_quantiles"), where, fail),
    )


def _quantiles(value: Any, where: str, fail) -> tuple[float, ...] | None:
    from pagesim.simulator.costmodel.serving import RESIDUAL_QUANTILES

    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != len(RESIDUAL_QUANTILES)
        or any(
            isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
            for v in value
        )
    ):
        raise fail(
            f"{where}.heldout_residual_quantiles: must be {len(RESIDUAL_QUANTILES)} finite numbers "
            f"(at {list(RESIDUAL_QUANTILES)})"
        )
    return tuple(float(v) for v in value)


def _string(value: Any, where: str, fail) -> str:
    if not isinstance(value, str):
        raise fail(f"{where}: must be a string, got {value!r}")
    return value


def _sources(value: Any, fail) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        raise fail("sources: must be a list of mappings with keys " + str(list(SOURCE_KEYS)))
    out = []
    for i, src in enumerate(value):
        if not isinstance(src, dict):
            raise fail(f"sources[{i}]: must be a mapping with keys {list(SOURCE_KEYS)}")
        unknown = sorted(set(src) - set(SOURCE_KEYS))
        if unknown:
            raise fail(
                f"sources[{i}]: unknown key {unknown[0]!r}; allowed keys: {list(SOURCE_KEYS)}"
            )
        missing = [k for k in SOURCE_KEYS if k not in src]
        if missing:
            raise fail(f"sources[{i}]: missing key {missing[0]!r}")
        out.append({k: _string(src[k], f"sources[{i}].{k}", fail) for k in SOURCE_KEYS})
    return tuple(out)


#: profiles already parsed, by (path, sha256 of the file's bytes): a sweep or an interval's
#: replicates load the same profile once per run, and parsing its YAML costs more than the
#: hash (profiles are frozen; nothing mutates one)
_LOADED: dict[tuple[str, str], Profile] = {}
_LOADED_MAX = 64


def load_profile(path: str | Path) -> Profile:
    import hashlib

    from pagesim import yamlio

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"profile file not found: {path}")
    key = (str(path), hashlib.sha256(path.read_bytes()).hexdigest())
    cached = _LOADED.get(key)
    if cached is not None:
        return cached
    profile = profile_from_dict(yamlio.read(path, "profile"), source=str(path))
    if len(_LOADED) >= _LOADED_MAX:
        _LOADED.clear()
    _LOADED[key] = profile
    return profile
