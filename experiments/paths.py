"""Dotted paths into nested spec documents (``allocator.block_size``).

A sweep or an override names a field of the RunSpec by its dotted path; these
helpers read and write such a path in a plain nested dict (parsed YAML), never in
a frozen spec. Writing creates the intermediate sections that are absent, so a
path may name a field the base document leaves at its default.
"""

from __future__ import annotations

import copy
from typing import Any


def set_path(doc: dict[str, Any], dotted_path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``doc`` with ``dotted_path`` set to ``value``."""
    out = copy.deepcopy(doc)
    node = out
    keys = dotted_path.split(".")
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = copy.deepcopy(value)
    return out


def apply_overrides(doc: dict[str, Any], path_to_value: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with every ``path -> value`` applied, in order."""
    for dotted_path, value in path_to_value.items():
        doc = set_path(doc, dotted_path, value)
    return doc
