"""Lazy exports: a package names its public API without importing it until first used.

A layer's ``__init__`` maps each public name to the module defining it and sets
``__getattr__ = lazy_exports(__name__, table)``: ``pagesim --help`` and ``pagesim list``
then import the command modules they need, not every layer's engine, pandas and pydantic.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, table: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``table[name]`` and caches the attribute."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
