"""Base of every spec section: frozen, strict pydantic models, and readable errors.

``extra="forbid"`` makes an unknown key an error; ``strict=True`` makes a wrong type
an error instead of a silent coercion (a YAML ``"16"`` is not 16; pagesim reads YAML
as 1.2 does, so ``1e3`` is the float 1000.0, which an integer field refuses with a
message saying so); ``allow_inf_nan=False`` refuses ``.inf`` and ``.nan`` everywhere.
:func:`error_text` words pydantic's errors for a person ("not a number", not
"should be greater than 0").
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def error_text(err: dict[str, Any]) -> str:
    """A pydantic error's message as pagesim prints it: without "Value error, ", and
    reworded where pydantic's would mislead (NaN, infinity, a float for an integer)."""
    value = err.get("input")
    if isinstance(value, float) and not isinstance(value, bool):
        if math.isnan(value):
            return "not a number (NaN); give a number"
        if math.isinf(value):
            return f"{value} is infinite; give a finite number"
        if err["type"] == "int_type" and value.is_integer():
            return (
                f"{value!r} is a float, and this key takes an integer "
                f"(YAML reads 1e3 as a float); write {int(value)}"
            )
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
    spec module need not import its plug-ins); an unknown name's error lists the
    registered ones. The generated docs print it as a pointer to ``pagesim list``, not
    as the names, so adding a plug-in to its dict is all it takes: specs, the CLI,
    ``pagesim list`` and the docs accept it, and no committed page goes stale.
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
        # not the names themselves: the generated docs stay the same when a plug-in is added
        return f"a registered {self.what} (`pagesim list` names them)"


class OneOf:
    """Field metadata: the value must equal one of ``values`` *and* have its type.

    For a key whose values are of mixed types (``false``, ``true``, ``pinned``), where a
    ``Literal`` would let pydantic take YAML's ``1`` for ``true``. The error names the
    allowed values as YAML spells them; the generated docs print them the same way.
    """

    def __init__(self, *values: Any) -> None:
        self.values = values

    @staticmethod
    def _yaml(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    def check(self, value: Any) -> Any:
        for allowed in self.values:
            if type(value) is type(allowed) and value == allowed:
                return value
        shown = ", ".join(self._yaml(v) for v in self.values)
        raise ValueError(f"{value!r} is not allowed; allowed: {shown}")

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(self.check)

    def __str__(self) -> str:
        return "one of " + ", ".join(f"`{self._yaml(v)}`" for v in self.values)
