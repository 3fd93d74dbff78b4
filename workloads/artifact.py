"""The PagedAttention paper artifact's ShareGPT lengths: a safe pickle reader and its CSV.

The paper's SOSP'23 artifact (GitHub ``sosp-ae-39/sosp-ae-astra``) ships the exact
ShareGPT workload it measured as ``datasets/sharegpt_opt_text_completion_length.pkl``:
a pickled list of ``(input_len, output_len)`` int pairs, the first round of each
conversation tokenized with the OPT tokenizer (84,226 pairs). Its generator
(``astra/benchmark/trace.py``) also accepts token lists in place of the ints and
uses their lengths; so do we.

Two layouts are read:

- the artifact's pickle, with :class:`NoGlobalsUnpickler`: an unpickler whose
  ``find_class`` refuses every global, so a pickle can only build plain containers
  and numbers. A hostile pickle (one that would call ``os.system`` or any other
  callable) fails before anything is called: pickle resolves a callable through
  ``find_class`` before it can call it;
- a CSV with the header ``input_len,output_len`` (the same pairs, e.g. converted once
  from the pickle).

Rows are kept in file order: the artifact's selection (``build.py``) depends on it.
A file that is neither, an empty one, a header without rows, a malformed row, or a
length that is negative, not an integer or above ``lengthtable.MAX_TOKENS`` is a
:class:`DataError` naming the file (and the row and column).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.columns import shown
from pagesim.errors import DataError
from pagesim.workloads.lengthtable import MAX_TOKENS, LengthTable, token_counts

CSV_COLUMNS = ("input_len", "output_len")


class NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global: only lists, tuples, ints and the like load."""

    def find_class(self, module: str, name: str):  # noqa: ANN201 - never returns
        raise pickle.UnpicklingError(f"refused global {module}.{name}: only plain data is read")


def read_length_pairs(path: str | Path) -> LengthTable:
    """The ``(input_len, output_len)`` pairs of ``path`` (``.pkl`` or ``.csv``), in file order."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    if path.suffix == ".pkl":
        prompt, output = _pairs_from_pickle(path)
    elif path.suffix == ".csv":
        prompt, output = _pairs_from_csv(path)
    else:
        raise DataError(
            f"{path}: expected the artifact's .pkl or a .csv of {','.join(CSV_COLUMNS)}"
        )
    note = (
        f"PagedAttention artifact ShareGPT lengths ({path.name}): {len(prompt)} pairs, "
        "first round of each conversation, OPT tokenizer"
    )
    return LengthTable(prompt_len=prompt, output_len=output, source_note=note)


def _pairs_from_pickle(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        data = NoGlobalsUnpickler(io.BytesIO(path.read_bytes())).load()
    except pickle.UnpicklingError as exc:
        raise DataError(f"{path}: not a plain-data pickle ({exc})") from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError) as exc:
        raise DataError(f"{path}: not a readable pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a list of (input_len, output_len) pairs")
    prompt = np.empty(len(data), dtype=np.int64)
    output = np.empty(len(data), dtype=np.int64)
    for row, pair in enumerate(data):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise DataError(f"{path}: item {row}: expected a pair (input_len, output_len)")
        prompt[row] = _length(path, row, pair[0], CSV_COLUMNS[0])
        output[row] = _length(path, row, pair[1], CSV_COLUMNS[1])
    return prompt, output


def _length(path: Path, row: int, value: object, column: str) -> int:
    """An int length, or the length of a token list (as the artifact's generator allows)."""
    length = len(value) if isinstance(value, list) else value
    if isinstance(length, int) and not isinstance(length, bool) and 0 <= length <= MAX_TOKENS:
        return length
    raise DataError(
        f"{path}: item {row}: a length must be an int >= 0 or a token list "
        f"(at most {MAX_TOKENS:,} tokens); {column} is {shown(value)}"
    )


def _pairs_from_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise DataError(
            f"{path}: empty file; expected the header {','.join(CSV_COLUMNS)}"
        ) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: malformed CSV: {str(exc).strip()}") from None
    if list(frame.columns) != list(CSV_COLUMNS):
        raise DataError(
            f"{path}: header {','.join(map(str, frame.columns))}; expected {','.join(CSV_COLUMNS)}"
        )
    if len(frame) == 0:
        raise DataError(f"{path}: no rows after the header")
    cols = []
    for name in CSV_COLUMNS:
        text = frame[name].str.strip()
        bad = ~text.str.fullmatch(r"\d+")
        if bad.any():
            line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise DataError(
                f"{path}: line {line}: {name} must be an integer >= 0, got {text[bad].iloc[0]!r}"
            )
        cols.append(token_counts(text, name, lambda row: f"{path}: line {row + 2}"))
    return cols[0], cols[1]
