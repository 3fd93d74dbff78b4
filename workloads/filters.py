"""Request filters, each drop counted under its reason.

A request is dropped, for the first rule it breaks, when:
``prompt_len < min_len`` or ``output_len < min_len`` (empty or trivial turns);
``prompt_len > max_prompt_len`` (the paper's chatbot and serving setups cap prompts
at 1024 tokens); ``prompt_len + output_len > max_model_len`` (it could never fit the
model's context). The counts go into ``Trace.dropped`` so nothing vanishes silently.
"""

from __future__ import annotations

import numpy as np


def apply_filters(
    prompt_len: np.ndarray,
    output_len: np.ndarray,
    *,
    min_len: int,
    max_prompt_len: int | None,
    max_model_len: int | None,
) -> tuple[np.ndarray, dict[str, int]]:
    """A keep-mask and ``{reason: count}`` (only reasons that dropped something)."""
    rules: list[tuple[str, np.ndarray]] = [
        (f"prompt_len < {min_len}", prompt_len < min_len),
        (f"output_len < {min_len}", output_len < min_len),
    ]
    if max_prompt_len is not None:
        rules.append((f"prompt_len > {max_prompt_len}", prompt_len > max_prompt_len))
    if max_model_len is not None:
        rules.append(
            (f"prompt_len + output_len > {max_model_len}", prompt_len + output_len > max_model_len)
        )
    keep = np.ones(len(prompt_len), dtype=bool)
    dropped: dict[str, int] = {}
    for reason, broken in rules:
        hit = keep & broken
        count = int(hit.sum())
        if count:
            dropped[reason] = count
        keep &= ~broken
    return keep, dropped
