"""Base of every spec section: frozen, strict pydantic models, and readable errors.

``extra="forbid"`` makes an unknown key an error; ``strict=True`` makes a wrong type
an error instead of a silent coercion (a YAML ``"16"`` is not 16, and a YAML ``1e3``
is a string: write ``1000`` or ``1.0e3``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def format_validation_error(exc: Any, source: str, prefix: str = "") -> str:
    """One line per problem: ``source: path.to[2].key: message`` (pydantic ValidationError in)."""
    lines = []
    for err in exc.errors():
        path = prefix
        for part in err["loc"]:
            if isinstance(part, int):
                path += f"[{part}]"
            else:
                path += f".{part}" if path else str(part)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{source}: {path or '<root>'}: {msg}")
    return "; ".join(lines)
