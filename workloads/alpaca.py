"""Alpaca loader: a JSON list of ``{"instruction", "input", "output"}`` records.

The prompt is the instruction, joined with the input by a newline when the input is
non-empty (the paper gives no template; a template would add the same constant to
every prompt); the output is the reference answer. Records that are not objects
with those three string fields are a :class:`DataError` naming the record.
"""

from __future__ import annotations

import json
from pathlib import Path

from pagesim.errors import DataError
from pagesim.workloads.lengthtable import LengthTable
from pagesim.workloads.tokenizer import TokenCounter

FIELDS = ("instruction", "input", "output")


def read_alpaca(path: str | Path) -> list[tuple[str, str]]:
    """``(prompt_text, output_text)`` per record."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: line {exc.lineno}: malformed JSON: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc})") from None
    if not isinstance(records, list):
        raise DataError(f"{path}: expected a JSON list of {{instruction, input, output}} records")
    out = []
    for index, rec in enumerate(records):
        if not isinstance(rec, dict) or not all(isinstance(rec.get(f), str) for f in FIELDS):
            raise DataError(f"{path}: record {index}: expected string fields {', '.join(FIELDS)}")
        prompt = rec["instruction"] + ("\n" + rec["input"] if rec["input"] else "")
        out.append((prompt, rec["output"]))
    return out


def alpaca_table(path: str | Path, counter: TokenCounter) -> LengthTable:
    """Tokenize an Alpaca file into a length table."""
    pairs = read_alpaca(path)
    return LengthTable(
        prompt_len=counter.count([p for p, _ in pairs]),
        output_len=counter.count([o for _, o in pairs]),
        source_note=f"Alpaca ({Path(path).name}): {len(pairs)} records; token counts: {counter.name}",
    )
