"""``AllocStatus``, the answer of an admission check, in a module of its own.

It is compiled with the engine's modules, so that compiled code reads ``AllocStatus.OK``,
``LATER`` and ``NEVER`` as constants (docs/compiled_modules.md, "Enums and constants").
``allocators.base`` re-exports it.
"""

from __future__ import annotations

import enum


class AllocStatus(enum.Enum):
    """Answer of an admission check (vLLM v0's ``AllocStatus``)."""

    OK = "ok"  # can be admitted now
    LATER = "later"  # not now; may fit once memory is freed
    NEVER = "never"  # can never fit in this pool, whatever is freed
