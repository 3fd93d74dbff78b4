"""Which keys a spec model allows at a path: for error messages and path checks.

A typo'd key in an experiment file is reported with the keys that ARE allowed at
that place (``base.allocator``: block_size, kind, ...), so the message is
actionable on its own. The lookup walks the pydantic model classes; it never
instantiates them.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model class inside an annotation (``X``, ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def model_at(root: type[BaseModel], keys: list[str]) -> type[BaseModel] | None:
    """The model class reached by following ``keys`` from ``root`` (None if not a section)."""
    model: type[BaseModel] | None = root
    for key in keys:
        if model is None or key not in model.model_fields:
            return None
        model = _model_in(model.model_fields[key].annotation)
    return model


def allowed_keys(root: type[BaseModel], keys: list[str]) -> list[str]:
    """Sorted field names of the section at ``keys`` (empty if it is not a section)."""
    model = model_at(root, keys)
    return sorted(model.model_fields) if model is not None else []


def check_dotted_path(root: type[BaseModel], dotted_path: str) -> str | None:
    """None if ``dotted_path`` names a field of ``root``; otherwise why not, with allowed keys."""
    keys = dotted_path.split(".")
    for depth, key in enumerate(keys):
        parent = model_at(root, keys[:depth])
        if parent is None:
            where = ".".join(keys[:depth])
            return f"{where!r} is a value, not a section, so {dotted_path!r} cannot be set"
        if key not in parent.model_fields:
            section = ".".join(keys[:depth]) or "<top level>"
            allowed = ", ".join(sorted(parent.model_fields))
            return f"unknown key {key!r} in {section}; allowed keys: {allowed}"
    return None
