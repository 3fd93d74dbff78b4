"""`pagesim` subcommands of the calibrate layer (not yet implemented)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this layer's subcommands (none yet)."""
