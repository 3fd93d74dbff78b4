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


def error_text(err: dict) -> str:
    """A pydantic error's message as pagesim prints it (without "Value error, ")."""
    msg = err["msg"]
    return msg.removeprefix("Value error, ") if err["type"] == "value_error" else msg


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
        msg = "unknown key" if err["type"] == "extra_forbidden" else error_text(err)
        lines.append(f"{source}: {path or '<root>'}: {msg}")
    return "; ".join(lines)


class Registered:
    """Field metadata: the value must be a name in a plug-in registry (a plain dict).

    ``Annotated[str, Registered("pagesim.allocators.registry", "ALLOCATORS", "allocator")]``
    validates against the dict's keys, imported when a spec is validated (so a layer's
    spec module need not import its plug-ins), and prints as the allowed names in the
    generated docs. Adding a plug-in to its dict is all it takes for specs, the CLI and
    the docs to accept it.
    """

    def __init__(self, module: str, attribute: str, what: str) -> None:
        self.module, self.attribute, self.what = module, attribute, what

    def registry(self) -> dict[str, Any]:
        import importlib

        return getattr(importlib.import_module(self.module), self.attribute)

    def names(self) -> list[str]:
        return sorted(self.registry())

    def check(self, value: str) -> str:
        if value not in self.registry():
            raise ValueError(f"unknown {self.what} {value!r}; allowed: {', '.join(self.names())}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __str__(self) -> str:
        return "one of " + ", ".join(f"`{name}`" for name in self.names())
