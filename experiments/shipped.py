"""The experiments shipped with pagesim (``experiments/*.yaml``, package data).

``pagesim run memory_waste`` finds the shipped file by its short name through
:mod:`importlib.resources`, so it works from an installed wheel as well as from a
source tree. A path to an existing file always wins over a shipped name.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pagesim.errors import ConfigError


def shipped_experiments() -> dict[str, Path]:
    """Short name -> path of every shipped experiment file, sorted by name."""
    root = resources.files("pagesim.experiments")
    name_to_path = {}
    for entry in root.iterdir():
        if entry.name.endswith(".yaml") and entry.name != "paper_targets.yaml":
            name_to_path[entry.name.removesuffix(".yaml")] = Path(str(entry))
    return dict(sorted(name_to_path.items()))


def resolve_experiment(source: str | Path) -> Path:
    """A path for ``source``: an existing file, else a shipped experiment's short name."""
    path = Path(source)
    if path.is_file():
        return path
    shipped = shipped_experiments()
    if str(source) in shipped:
        return shipped[str(source)]
    raise ConfigError(
        f"{source}: no such experiment file, and not a shipped experiment; "
        f"shipped: {', '.join(shipped) or '(none)'}"
    )
