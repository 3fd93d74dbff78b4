"""``calibrate import`` on malformed tables (issue #34, items 3 and 4): an empty file, a
header without rows, a word in a number column, a batch of 10**12 are each one line
naming the file, the line and the column, and nothing is written.

Before: an empty file or a word in a number column was a traceback; a header-only MLP
table wrote a profile whose GEMM cost silently fell back to the analytic model; a batch
of 10**12 sequences began building a list of 10**12 contexts.
"""

from __future__ import annotations

import pandas as pd
import pytest

from pagesim.calibrate import vidur
from pagesim.cli import main

MLP = {
    "n_head": 32, "n_kv_head": 32, "n_embd": 4096, "n_expanded_embd": 11008,
    "use_gated_mlp": True, "num_tensor_parallel_workers": 1,
}  # fmt: skip
ATTENTION = {
    "n_embd": 8192, "n_q_head": 64, "n_kv_head": 8, "block_size": 16,
    "num_tensor_parallel_workers": 2, "prefill_chunk_size": 0, "is_prefill": False,
    "time_stats.attn_prefill.median": float("nan"),
}  # fmt: skip
SPLITWISE = {
    "model": "llama2-70b", "hardware": "a100-80gb", "tensor_parallel": 4, "prompt_size": 512,
    "token_size": 128, "prompt_time": 250.0, "token_time": 40.0,
}  # fmt: skip


def _mlp_table(path, rows: int = 6):
    times = {f"time_stats.{op}.median": 0.05 for op in vidur.GEMM_OPS + vidur.POINTWISE_OPS}
    pd.DataFrame([{**MLP, **times, "num_tokens": 2**i} for i in range(rows)]).to_csv(
        path, index=False
    )
    return path


def _attention_table(path):
    rows = [
        {**ATTENTION, "batch_size": b, "kv_cache_size": c, "time_stats.attn_decode.median": 0.02}
        for b in (1, 2, 4) for c in (64, 512)
    ]  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _splitwise_table(path):
    rows = [{**SPLITWISE, "batch_size": b} for b in (1, 2, 4, 8) for _ in range(3)]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _set_cell(path, line: int, column: str, text: str):
    """Write ``text`` into ``column`` at file line ``line`` (line 1 is the header)."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[line - 2, column] = text
    df.to_csv(path, index=False)


def _import(capsys, tmp_path, flag: str, table) -> tuple[int, str]:
    out = tmp_path / "out"
    argv = ["calibrate", "import", "--gpu", "a100-80gb", flag, str(table),
            "--origin", f"{table.name}=made/up@abc", "--out", str(out)]  # fmt: skip
    code = main(argv)
    err = capsys.readouterr().err
    assert not out.exists(), "a refused import wrote its output folder"
    assert "Traceback" not in err
    # the import says what it reads before it reads; the error is the one line after
    return code, "\n".join(line for line in err.splitlines() if line.startswith("pagesim: error"))


def _vidur_fault(path, fault: str):
    if fault == "empty":
        path.write_text("")
    elif fault == "header only":
        path.write_text(path.read_text().splitlines()[0] + "\n")


@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        ("empty", "empty file; expected a CSV table with a header"),
        ("header only", "no rows after the header; nothing to fit"),
    ],
)
@pytest.mark.parametrize(("flag", "writer"), [("--mlp", _mlp_table),
                                              ("--attention", _attention_table)])  # fmt: skip
def test_empty_and_header_only_vidur_tables(tmp_path, capsys, flag, writer, fault, needle):
    table = writer(tmp_path / "t.csv")
    _vidur_fault(table, fault)
    code, err = _import(capsys, tmp_path, flag, table)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{table}: {needle}" in err


@pytest.mark.parametrize(
    ("flag", "writer", "column", "text", "needle"),
    [
        ("--attention", _attention_table, "batch_size", "many",
         "batch_size must be an integer from 1 to 100,000, got 'many'"),
        ("--attention", _attention_table, "batch_size", "1000000000000",
         "batch_size must be at most 100,000, got 1000000000000"),
        ("--attention", _attention_table, "kv_cache_size", "12345678901234567890123",
         "kv_cache_size must be at most 10,000,000"),
        ("--attention", _attention_table, "time_stats.attn_decode.median", "fast",
         "time_stats.attn_decode.median must be a finite number, got 'fast'"),
        ("--mlp", _mlp_table, "num_tokens", "2.5",
         "num_tokens must be an integer from 1 to 10,000,000, got 2.5"),
        ("--mlp", _mlp_table, "time_stats.mlp_up_proj.median", "slow",
         "time_stats.mlp_up_proj.median must be a finite number, got 'slow'"),
        ("--mlp", _mlp_table, "n_head", "0", "n_head must be an integer from 1"),
    ],
)  # fmt: skip
def test_bad_cells_in_vidur_tables(tmp_path, capsys, flag, writer, column, text, needle):
    table = writer(tmp_path / "t.csv")
    _set_cell(table, 4, column, text)
    code, err = _import(capsys, tmp_path, flag, table)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{table}: line 4: {needle}" in err


@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        (("empty",), "empty file"),
        (("header only",), "no rows after the header"),
        (
            ("cell", "prompt_time", "slow"),
            "line 4: prompt_time must be a finite number, got 'slow'",
        ),
        (("cell", "batch_size", "1000000000000"), "line 4: batch_size must be at most 100,000"),
        (("cell", "tensor_parallel", "four"), "line 4: tensor_parallel must be an integer"),
    ],
)
def test_malformed_splitwise_tables(tmp_path, capsys, fault, needle):
    table = _splitwise_table(tmp_path / "perf_model.csv")
    if fault[0] == "cell":
        _set_cell(table, 4, fault[1], fault[2])
    else:
        _vidur_fault(table, fault[0])
    code, err = _import(capsys, tmp_path, "--splitwise", table)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{table}: {needle}" in err


def test_cpu_overheads_with_a_missing_part_are_refused(tmp_path, capsys):
    parts = dict.fromkeys(vidur.CPU_PARTS, 0.3)
    rows = [{"model_name": "m", "batch_size": b, "tensor_parallel_degree": 1, **parts,
             vidur.RAY_PART: 0.2} for b in (8, 16, 32)]  # fmt: skip
    table = tmp_path / "cpu.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    _set_cell(table, 3, vidur.RAY_PART, "")
    code, err = _import(capsys, tmp_path, "--cpu-overheads", table)
    assert code == 2 and f"{table}: line 3: {vidur.RAY_PART} must be a time >= 0 ms" in err
