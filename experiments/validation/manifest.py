"""A dataset's manifest: which settings each run ran with, its role, and the evidence.

Written before any closed-loop result is looked at (the fit runs and the serving
path's forms with it), shipped beside the readers (``distserve.yaml``), read strictly:
an unknown key or a wrong type names the key and the file.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from pagesim import yamlio
from pagesim.errors import ConfigError
from pagesim.simulator.costmodel.serving import SERVING_FORMS
from pagesim.specbase import StrictSpec, format_validation_error


class Launch(StrictSpec):
    settings: dict[str, Any]
    evidence: str


class Intervals(StrictSpec):
    """How the validation's intervals are made (``docs/intervals.md``). No ``seeds``: a
    replay of records replays their requests, which no seed draws again."""

    nominal: float = Field(gt=0, lt=1)
    replicates: int = Field(ge=2)
    sources: list[Literal["cost", "serving"]] = Field(min_length=1)
    seed: int = Field(ge=0)


class RunEntry(StrictSpec):
    launch: str
    role: Literal["fit", "held_out", "cross_launch"]
    evidence: str = ""


class Manifest(StrictSpec):
    dataset: str
    title: str
    origin: str
    repository: str
    commit: str
    server: str
    settings: dict[str, Any]
    launches: dict[str, Launch]
    default_launch: str
    runs: dict[str, RunEntry]
    serving_forms: list[str] = Field(min_length=1)
    selection_margin: float = Field(ge=0)
    saturation_ttft_s: float = Field(gt=0)
    intervals: Intervals | None = None

    def check(self, source: str) -> Manifest:
        for name, entry in self.runs.items():
            if entry.launch not in self.launches:
                raise ConfigError(
                    f"{source}: runs.{name}.launch: {entry.launch!r} is not one of "
                    f"{sorted(self.launches)}"
                )
        if self.default_launch not in self.launches:
            raise ConfigError(f"{source}: default_launch: {self.default_launch!r} is not a launch")
        unknown = [f for f in self.serving_forms if f not in SERVING_FORMS]
        if unknown:
            raise ConfigError(
                f"{source}: serving_forms: {unknown[0]!r} is not one of {list(SERVING_FORMS)}"
            )
        if not any(e.role == "fit" for e in self.runs.values()):
            raise ConfigError(f"{source}: runs: no run has role 'fit'")
        return self

    def fit_runs(self) -> list[str]:
        return [name for name, e in self.runs.items() if e.role == "fit"]

    def settings_of(self, launch: str) -> dict[str, Any]:
        """The common settings with ``launch``'s merged in, section by section."""
        doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.settings.items()}
        for key, value in self.launches[launch].settings.items():
            doc[key] = {**doc.get(key, {}), **value} if isinstance(value, dict) else value
        return doc


def load_manifest(name_or_path: str | Path) -> Manifest:
    """A shipped manifest by file name (``distserve.yaml``), or a path."""
    path = Path(name_or_path)
    if not path.is_file():
        path = Path(str(resources.files("pagesim.experiments.validation") / str(name_or_path)))
    doc = yamlio.read(path, "validation manifest")
    try:
        return Manifest.model_validate(doc).check(str(path))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path))) from None
