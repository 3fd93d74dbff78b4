"""Writing a file whole or not at all: a temporary file beside it, renamed into place.

A reader (another process, a crash's survivor, a rerun that reuses outputs) sees the
old file or the new one, never half of one. Every layer writes through these:
profiles and calibration reports, prepared length tables, experiment outputs.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replaced_atomically(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (``.tmp-<name>-<pid>-<random>``, its folder made)
    for the caller to write; renamed onto ``path`` when the block ends normally, removed
    when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    with replaced_atomically(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())
