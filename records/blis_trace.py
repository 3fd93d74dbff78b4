"""BLIS trace v3 (llm-d inference-sim's ``blis observe``), into a :class:`~.run.MeasuredRun`.

A run is a folder with ``trace.yaml`` (the header: ``trace_version: 3``, ``time_unit:
us``, ``mode``, ``workload_seed``, ``warm_up_requests``, ``server: {model, ...}``) and
``trace.csv`` or ``trace.csv.gz`` (one row per request). What the columns mean, from
inference-sim (GitHub ``inference-sim/inference-sim``, commit f90a1e3;
``sim/workload/tracev2.go``: the header and the columns; ``cmd/observe.go``: how the real
client fills them; ``sim/workload/replay.go``: how BLIS replays them):

- ``send_time_us``: the client's wall clock (Unix µs) just before the HTTP request went
  out (0 when it failed before being sent); ``first_chunk_time_us``,
  ``last_chunk_time_us``: when the first and the last streamed chunk arrived;
  ``num_chunks``: how many chunks. TTFT = first chunk − send, E2E = last chunk − send
  (BLIS's own calibration baseline), so a request's arrival here is its send time.
- ``server_input_tokens``: the server's ``usage.prompt_tokens`` (0 when not recorded);
  ``input_tokens`` the client's count without its shared prefix (``prefix_length``);
  ``output_tokens``: the server's ``usage.completion_tokens`` (0 without usage).
  prompt_len = ``server_input_tokens``, or the client's ``input_tokens +
  prefix_length`` where the server's count is missing (counted in ``meta``).
- ``status``: ``ok``, ``error`` or ``timeout``; ``arrival_time_us``: the workload's
  scheduled arrival (µs from the run's start), kept out of the table.

Failed requests (``status`` not ``ok``) follow the rule of :mod:`.run`: one with a send
time stays in the table and the trace, ``failed``, with the output tokens the server
reported, or, where it reported none, the chunks the client received (a streamed chunk
carries at most one token; at least 1: its prefill ran or was queued); one never sent
(send time 0) is left out. ``meta`` counts both, by status.

The run's name is its folder relative to ``root`` (``results/sweep_rate/agg_2rps/
vanilla``); its rate is the nominal one where its path says ``<N>rps`` (``agg_2rps``),
else measured from the send times; ``meta["rate"]`` says which. ``meta`` keeps the
header (``model``, ``workload_seed``, ``mode``, ``warm_up_requests``: BLIS's calibration
leaves that many first requests out of its statistics; the table keeps them, as the
server saw them, and a caller that wants them out drops them). A header whose ``trace_version``
is not 3 or whose ``time_unit`` is not ``us`` is refused, as is any cell that is not
what its column holds (an error names the file, the row as a spreadsheet shows it and
the column).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pagesim import yamlio
from pagesim.columns import integer_column, number_column, shown
from pagesim.errors import ConfigError, DataError
from pagesim.records.cells import check_rate, clock_column, csv_cells, read_text, row_of
from pagesim.records.run import MeasuredRun, check_records, sha256_of
from pagesim.workloads.lengthtable import MAX_TOKENS

HEADER = "trace.yaml"
DATA_FILES = ("trace.csv", "trace.csv.gz")
VERSION = 3
TIME_UNIT = "us"
COLUMNS = (
    "request_id",
    "input_tokens",
    "output_tokens",
    "server_input_tokens",
    "send_time_us",
    "first_chunk_time_us",
    "last_chunk_time_us",
    "num_chunks",
    "status",
)
STATUSES = ("ok", "error", "timeout")
#: the header keys kept in ``meta``
HEADER_KEYS = ("created_at", "mode", "warm_up_requests", "workload_seed", "workload_spec")
#: a path part naming the run's nominal rate: ``agg_2rps``, ``8rps``, ``rate-0.5rps``
NOMINAL_RATE = re.compile(r"(?:^|[_-])(\d+(?:\.\d+)?)rps$")
US_PER_S = 1e6


def recognises(path: Path) -> bool:
    """A folder holding ``trace.yaml``, or that file, or a ``trace.csv[.gz]`` beside it."""
    folder = path if path.is_dir() else path.parent
    named = path.is_dir() or path.name in (HEADER, *DATA_FILES)
    return named and (folder / HEADER).is_file()


def _header(path: Path) -> dict[str, Any]:
    try:
        doc = yamlio.load(read_text(path, "a BLIS trace header"), str(path))
    except ConfigError as exc:
        raise DataError(str(exc)) from None
    if not isinstance(doc, dict):
        raise DataError(f"{path}: expected a mapping (a BLIS trace header)")
    version, unit = doc.get("trace_version"), doc.get("time_unit")
    if isinstance(version, bool) or version != VERSION or unit != TIME_UNIT:
        raise DataError(
            f"{path}: trace_version {version!r}, time_unit {unit!r}: this reader reads "
            f"trace_version {VERSION} with time_unit {TIME_UNIT!r} only"
        )
    return doc


def _data_file(folder: Path) -> Path:
    found = [folder / name for name in DATA_FILES if (folder / name).is_file()]
    if not found:
        raise DataError(f"{folder}: no {' or '.join(DATA_FILES)} beside {HEADER} (a BLIS trace)")
    if len(found) > 1:
        raise DataError(f"{folder}: both {' and '.join(DATA_FILES)}: keep one")
    return found[0]


def _name_and_rate(folder: Path, root: Path | None) -> tuple[str, float | None, str]:
    """The run's name and its nominal rate with the path part that states it."""
    name = folder.name
    if root is not None:
        try:
            name = folder.resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            raise DataError(f"{folder}: not inside the data folder {root}") from None
    for part in reversed(folder.resolve().parts):
        match = NOMINAL_RATE.search(part)
        if match:
            return name, float(match.group(1)), part
    return name, None, ""


def _counts(cells: pd.DataFrame, col: str, where, low: int = 0) -> np.ndarray:
    return integer_column(cells[col], col, where, low=low, high=MAX_TOKENS)


def _columns(cells: pd.DataFrame, path: Path) -> dict[str, np.ndarray]:
    """Each needed cell checked; the times of the rows sent, in µs."""
    where = row_of(path)
    status = cells["status"].str.strip()
    bad = ~status.isin(STATUSES)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DataError(
            f"{where(i)}: status must be one of {list(STATUSES)}, got {shown(cells['status'].iloc[i])}"
        )
    ok = (status == "ok").to_numpy()
    send = number_column(cells["send_time_us"], "send_time_us", where)
    sent = ok | (send != 0)
    out = {"ok": ok, "sent": sent}
    out["request_id"] = integer_column(cells["request_id"], "request_id", where, low=0, high=2**53)
    for col in ("send_time_us", "first_chunk_time_us", "last_chunk_time_us"):
        rows = sent if col == "send_time_us" else ok
        column = cells[col].where(rows, "0")
        out[col] = clock_column(column, col, where, per_s=US_PER_S) * US_PER_S
        if col == "send_time_us" and (out[col][sent] <= 0).any():
            i = int(np.flatnonzero(sent & (out[col] <= 0))[0])
            raise DataError(
                f"{where(i)}: send_time_us must be a Unix time in µs, got {shown(cells[col].iloc[i])}"
            )
    for col in ("input_tokens", "output_tokens", "server_input_tokens", "num_chunks"):
        out[col] = _counts(cells, col, where)
    prefix = cells["prefix_length"] if "prefix_length" in cells else pd.Series(["0"] * len(cells))
    out["prefix_length"] = integer_column(prefix, "prefix_length", where, low=0, high=MAX_TOKENS)
    return out


def _table(
    cols: dict[str, np.ndarray], cells: pd.DataFrame, path: Path, meta: dict
) -> pd.DataFrame:
    """The canonical columns of the sent rows, in file order (rows: spreadsheet rows)."""
    where = row_of(path)
    ok, sent = cols["ok"], cols["sent"]
    from_client = cols["server_input_tokens"] == 0
    prompt = np.where(
        from_client, cols["input_tokens"] + cols["prefix_length"], cols["server_input_tokens"]
    )
    for mask, what in (
        (sent & (prompt < 1), "a prompt of 0 tokens"),
        (ok & (cols["output_tokens"] < 1), "an ok request with no output_tokens"),
    ):
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            raise DataError(
                f"{where(i)}: {what} (server_input_tokens {cols['server_input_tokens'][i]}, input_tokens {cols['input_tokens'][i]}, output_tokens {cols['output_tokens'][i]})"
            )
    output = np.where(
        cols["output_tokens"] > 0, cols["output_tokens"], np.maximum(cols["num_chunks"], 1)
    )
    t0 = cols["send_time_us"][sent].min()
    df = pd.DataFrame(
        {
            "arrival_s": (cols["send_time_us"] - t0) / US_PER_S,
            "prompt_len": prompt,
            "output_len": output,
            "first_token_s": (cols["first_chunk_time_us"] - t0) / US_PER_S,
            "finish_s": (cols["last_chunk_time_us"] - t0) / US_PER_S,
            "failed": ~ok,
        }
    )
    status = cells["status"].str.strip()
    meta["num_failed"] = int((sent & ~ok).sum())
    meta["failed_by_status"] = status[sent & ~ok].value_counts().to_dict()
    meta["num_never_sent"] = int((~sent).sum())
    meta["prompt_from_client_count"] = int((sent & from_client).sum())
    if meta["num_failed"] or meta["num_never_sent"]:
        meta["failed_rule"] = (
            "failed requests replayed (prompt, output tokens reported or chunks received, "
            "at least 1), left out of the measured statistics; never-sent ones left out"
        )
    return df[sent].assign(_row=np.flatnonzero(sent) + 2)


def read_blis_trace(
    path: str | Path, root: str | Path | None = None, dataset: str = "blis-trace"
) -> MeasuredRun:
    """One BLIS trace v3 run (module docstring): ``path`` is its folder, its
    ``trace.yaml`` or its ``trace.csv[.gz]``; ``root``, the data folder its name is
    relative to."""
    path = Path(path)
    folder = path.parent if path.name in (HEADER, *DATA_FILES) and path.is_file() else path
    header_path = folder / HEADER
    if not header_path.is_file():
        raise DataError(f"{folder}: no {HEADER} (a BLIS trace run folder)")
    header = _header(header_path)
    data = _data_file(folder)
    cells = csv_cells(read_text(data, "a BLIS trace"), data, COLUMNS, "BLIS traces")
    cols = _columns(cells, data)
    meta: dict[str, Any] = {key: header[key] for key in HEADER_KEYS if key in header}
    server = header.get("server") if isinstance(header.get("server"), dict) else {}
    meta["model"] = server.get("model")
    meta["server"] = server
    df = _table(cols, cells, data, meta)
    order = np.argsort(df["arrival_s"].to_numpy(), kind="stable")
    df = df.iloc[order].reset_index(drop=True)
    fields = {
        "arrival_s": "send_time_us",
        "first_token_s": "first_chunk_time_us",
        "finish_s": "last_chunk_time_us",
        "prompt_len": "server_input_tokens",
        "output_len": "output_tokens",
    }
    table = check_records(
        df.drop(columns="_row"), str(data), rows=df["_row"].to_numpy(), fields=fields
    )
    meta["request_ids"] = cols["request_id"][cols["sent"]][order].tolist()
    name, nominal, part = _name_and_rate(folder, root)
    if nominal is not None:
        rate = nominal
        meta["rate"] = f"nominal: the path says {part!r}"
    else:
        span = float(table["arrival_s"].iloc[-1])
        rate = (len(table) - 1) / span if span > 0 else float("inf")
        meta["rate"] = "measured from the send times (the path names no <N>rps)"
    rate = check_rate(rate, f"{folder}: the run's rate ({meta['rate']}),")
    return MeasuredRun(
        name=name,
        dataset=dataset,
        table=table,
        rate_req_s=float(rate),
        sources=((str(header_path), sha256_of(header_path)), (str(data), sha256_of(data))),
        meta=meta,
    )
