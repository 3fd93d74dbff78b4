"""``AllocStatus``, the answer of an admission check, in a module of its own.

It is compiled with the engine's modules (``pagesim/_native.py``): compiled code then
reads ``AllocStatus.OK``, ``LATER`` and ``NEVER`` as constants, where a Python enum
class's attribute look-up goes through its metaclass's ``__getattr__`` (Python 3.11)
at every admission check. ``allocators.base`` re-exports it.
"""

from __future__ import annotations

import enum


class AllocStatus(enum.Enum):
    """Answer of an admission check (vLLM v0's ``AllocStatus``)."""

    OK = "ok"  # can be admitted now
    LATER = "later"  # not now; may fit once memory is freed
    NEVER = "never"  # can never fit in this pool, whatever is freed
