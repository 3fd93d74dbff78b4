"""Markdown tables of results, as summary.md and the paper report print them."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any) -> str:
    """A cell: floats to 4 significant digits (``nan`` as such), anything else as ``str``."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """The lines of a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return lines
