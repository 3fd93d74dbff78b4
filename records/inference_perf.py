"""The shared-prefix client of inference-perf, as the inference-sim runs used it, as a Trace.

Scenario: inference-sim (GitHub ``inference-sim/training``, commit ed5c1d2, ``default_args/``)
measured vLLM 0.15.1 on H100 with inference-perf (GitHub ``kubernetes-sigs/inference-perf``)
as the client. Each experiment folder has ``profile.yaml`` (the client configuration it was
given, one line of JSON) and ``results/config.yaml`` (the configuration the client resolved
and ran). The client's ``shared_prefix`` data generator and ``constant`` load, as v0.2.0
implements them (``inference_perf/datagen/shared_prefix_datagen.py``,
``loadgen/load_timer.py``, ``loadgen/load_generator.py``):

- prompts: ``num_groups`` system prompts of ``system_prompt_len`` random token ids, and
  per group ``num_prompts_per_group`` questions of ``question_len`` random ids; each is
  decoded to text and a prompt is ``system + " " + question``; the list is shuffled
  (Python's unseeded ``random.shuffle``: any order is as likely) and request n of a stage
  sends prompt ``n % len(prompts)`` with ``max_tokens = output_len``; the server ignores
  EOS, so every request generates exactly ``output_len`` tokens;
- load: each stage sends ``int(rate x duration)`` requests at exponential gaps rescaled to
  sum to exactly ``duration`` (the last request leaves at the stage's end); a stage starts
  1 s after it is set up, the next is set up once every request of the previous one has
  finished, after ``load.interval`` (1 s) more.

What the 16 runs actually ran (checked in every folder): ``profile.yaml`` asks for 9 x 5,
11 x 4, 10 x 5 or 23 x 1 prompts and multi-turn chat (``num_unique_system_prompts``,
``num_users_per_system_prompt``, ``enable_multi_turn_chat``), but every
``results/config.yaml`` shows ``num_groups: 10, num_prompts_per_group: 10`` (the defaults)
and no multi-turn: the client that ran predates those keys (aliases from v0.4.0,
multi-turn from v0.3.0) and ignored them. :func:`read_client` therefore reads the
resolved configuration, and lists what ``profile.yaml`` asked for that did not run.

Token counts. Random ids decoded and tokenized again do not come back as the same number
of tokens, and the server adds a BOS token: the runs' prompt lengths (counted by the
client with the server's tokenizer, BOS included) average 4-5% above ``1 + system +
question`` (Llama-2-7B "general": 575.45 against 548). ``token_scale`` (server tokens
per configured token) rescales both parts; :func:`read_client` sets it from the run's
measured mean where the stage metrics are there, else it is 1. A prompt is then a shared
segment per group (BOS + the system prompt) followed by its own question segment, so
prefix caching hits the system prompt of every group and, from the second round of the
prompt list on, whole prompts. Per-prompt spread of the lengths (the runs: +-3%) is not
modelled: every prompt has the mean length.

Not modelled: the gap between stages is taken as ``stage_gap_s`` (default: the 1 s set-up
plus the 1 s interval) after the previous stage's last send, while the client waited for
the previous stage's last request to finish first (a few seconds in the runs that kept
up; a static trace cannot know it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pagesim.errors import DataError
from pagesim.records.cells import load_json, read_text
from pagesim.workloads.assemble import assemble_trace
from pagesim.workloads.lengthtable import MAX_TOKENS
from pagesim.workloads.trace import Trace

#: the client's set-up before a stage's first request (``run_stage``: perf_counter() + 1)
STAGE_SETUP_S = 1.0
#: inference-perf's default ``load.interval`` between stages
DEFAULT_INTERVAL_S = 1.0
#: ``shared_prefix`` keys of the resolved configuration (v0.2.0 names)
RESOLVED_KEYS = (
    "num_groups",
    "num_prompts_per_group",
    "system_prompt_len",
    "question_len",
    "output_len",
)
#: later clients' names of the same settings (v0.4.0 aliases)
ALIASES = {
    "num_unique_system_prompts": "num_groups",
    "num_users_per_system_prompt": "num_prompts_per_group",
}


@dataclass(frozen=True)
class LoadStage:
    """One constant-rate stage: ``int(rate_req_s x duration_s)`` requests over ``duration_s``."""

    rate_req_s: float
    duration_s: float

    @property
    def num_requests(self) -> int:
        return int(self.rate_req_s * self.duration_s)


@dataclass(frozen=True)
class SharedPrefixClient:
    """What inference-perf's shared-prefix client sent (module docstring)."""

    num_groups: int
    num_prompts_per_group: int
    system_prompt_len: int
    question_len: int
    output_len: int
    stages: tuple[LoadStage, ...]
    stage_interval_s: float = DEFAULT_INTERVAL_S
    token_scale: float = 1.0
    #: what the configuration asked for that the client did not run, and other caveats
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for key in ("num_groups", "num_prompts_per_group", "question_len", "output_len"):
            if getattr(self, key) < 1:
                raise DataError(f"shared_prefix.{key}: must be >= 1, got {getattr(self, key)}")
        if self.system_prompt_len < 0 or self.token_scale <= 0:
            raise DataError("shared_prefix: system_prompt_len must be >= 0 and token_scale > 0")
        if not self.stages or any(s.rate_req_s <= 0 or s.duration_s <= 0 for s in self.stages):
            raise DataError("load.stages: need at least one stage, each with rate and duration > 0")

    @property
    def num_prompts(self) -> int:
        return self.num_groups * self.num_prompts_per_group

    @property
    def shared_len(self) -> int:
        """Tokens of a group's shared part: BOS and the system prompt, rescaled."""
        return 1 + round(self.system_prompt_len * self.token_scale)

    @property
    def own_len(self) -> int:
        """Tokens of a prompt's question, rescaled."""
        return max(1, round(self.question_len * self.token_scale))


def _read_yaml_or_json(path: Path) -> dict[str, Any]:
    from pagesim import yamlio

    doc = yamlio.read(path, "YAML/JSON file")  # JSON is YAML
    if not isinstance(doc, dict):
        raise DataError(f"{path}: expected a mapping")
    return doc


def _shared_prefix(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    data = doc.get("data") or {}
    if data.get("type") != "shared_prefix" or not isinstance(data.get("shared_prefix"), dict):
        raise DataError(f"{path}: data.type is {data.get('type')!r}, not 'shared_prefix'")
    return {ALIASES.get(k, k): v for k, v in data["shared_prefix"].items()}


def _stages(doc: dict[str, Any], path: Path) -> tuple[LoadStage, ...]:
    load = doc.get("load") or {}
    if load.get("type") != "constant":
        raise DataError(f"{path}: load.type is {load.get('type')!r}; only 'constant' is modelled")
    try:
        return tuple(LoadStage(float(s["rate"]), float(s["duration"])) for s in load["stages"])
    except (KeyError, TypeError, ValueError):
        raise DataError(f"{path}: load.stages must be a list of {{rate, duration}}") from None


def read_client(exp_dir: str | Path) -> SharedPrefixClient:
    """The client one inference-sim experiment ran (module docstring).

    Reads ``results/config.yaml`` (what ran), or ``profile.yaml`` where there is none
    (then multi-turn chat is refused: not modelled); ``token_scale`` from the stage
    metrics' prompt-length mean (``results/stage_*_lifecycle_metrics.json``) when present.
    """
    exp_dir = Path(exp_dir)
    resolved, asked = exp_dir / "results" / "config.yaml", exp_dir / "profile.yaml"
    if not resolved.is_file() and not asked.is_file():
        raise DataError(
            f"{exp_dir}: neither results/config.yaml nor profile.yaml (an inference-sim experiment)"
        )
    source = resolved if resolved.is_file() else asked
    doc = _read_yaml_or_json(source)
    settings = _shared_prefix(doc, source)
    missing = [k for k in RESOLVED_KEYS if k not in settings]
    if missing:
        raise DataError(f"{source}: data.shared_prefix has no {missing[0]!r}")
    notes: list[str] = []
    if settings.get("enable_multi_turn_chat"):
        raise DataError(f"{source}: enable_multi_turn_chat is on: multi-turn chat is not modelled")
    if source == resolved and asked.is_file():
        wanted = _shared_prefix(_read_yaml_or_json(asked), asked)
        ignored = {k: v for k, v in wanted.items() if settings.get(k) != v}
        if ignored:
            notes.append(
                f"profile.yaml asked for {ignored}; the client ran { ({k: settings.get(k) for k in ignored}) }"
            )
    interval = float((doc.get("load") or {}).get("interval") or DEFAULT_INTERVAL_S)
    client = SharedPrefixClient(
        num_groups=int(settings["num_groups"]),
        num_prompts_per_group=int(settings["num_prompts_per_group"]),
        system_prompt_len=int(settings["system_prompt_len"]),
        question_len=int(settings["question_len"]),
        output_len=int(settings["output_len"]),
        stages=_stages(doc, source),
        stage_interval_s=interval,
        notes=tuple(notes),
    )
    means = []
    for path in sorted((exp_dir / "results").glob("stage_*_lifecycle_metrics.json")):
        metrics = load_json(read_text(path, "stage metrics"), path, "stage metrics")
        try:
            mean = metrics["successes"]["prompt_len"]["mean"]
        except (KeyError, TypeError):
            raise DataError(f"{path}: no successes.prompt_len.mean") from None
        if (
            isinstance(mean, bool)
            or not isinstance(mean, int | float)
            or not 1 <= mean <= MAX_TOKENS
        ):
            raise DataError(
                f"{path}: successes.prompt_len.mean must be a token count from 1 to "
                f"{MAX_TOKENS:,}, got {mean!r}"
            )
        means.append(float(mean))
    if means:
        nominal = client.system_prompt_len + client.question_len
        scale = (float(np.mean(means)) - 1) / nominal
        note = (
            f"token_scale {scale:.4f}: the stages' measured prompt-length mean "
            f"{np.mean(means):.2f} (BOS included) over 1 + {nominal} configured tokens"
        )
        client = replace(client, token_scale=scale, notes=(*client.notes, note))
    return client


def shared_prefix_trace(
    client: SharedPrefixClient,
    rng: np.random.Generator,
    *,
    stage_gap_s: float | None = None,
    name: str = "inference-perf-shared-prefix",
) -> Trace:
    """Every request the client sends, in order (module docstring): the prompt list
    shuffled by ``rng``, each stage's exponential gaps drawn from ``rng`` and rescaled to
    its duration; stage 0 starts at 0, each next one ``stage_gap_s`` (default: set-up +
    interval) after the previous stage's last send."""
    gap = STAGE_SETUP_S + client.stage_interval_s if stage_gap_s is None else stage_gap_s
    # prompt p of the shuffled list: group groups[p]; its own content is segment
    # num_groups + p (prompt ids never collide with group ids)
    groups = rng.permutation(np.repeat(np.arange(client.num_groups), client.num_prompts_per_group))
    shared, own = client.shared_len, client.own_len
    arrivals, prompt_ids = [], []
    start = 0.0
    for stage in client.stages:
        n = stage.num_requests
        if n == 0:
            continue
        gaps = rng.exponential(1.0 / stage.rate_req_s, n)
        times = start + np.cumsum(gaps * (stage.duration_s / gaps.sum()))
        arrivals.append(times)
        prompt_ids.append(np.arange(n) % client.num_prompts)
        start = float(times[-1]) + gap
    if not arrivals:
        raise DataError("load.stages: no stage sends a request (rate x duration < 1)")
    prompt = np.concatenate(prompt_ids)
    segments = [
        ((int(groups[p]), shared), (client.num_groups + int(p), own)) for p in prompt.tolist()
    ]
    return assemble_trace(
        prompt_len=np.full(len(prompt), shared + own, dtype=np.int64),
        output_len=np.full(len(prompt), client.output_len, dtype=np.int64),
        arrival_s=np.concatenate(arrivals),
        segments=segments,
        name=name,
        source_note=(
            f"inference-perf shared_prefix: {client.num_groups} x {client.num_prompts_per_group} "
            f"prompts of {shared} + {own} tokens, {client.output_len} out; stages "
            + ", ".join(f"{s.rate_req_s:g} req/s x {s.duration_s:g} s" for s in client.stages)
        ),
    )
