import pytest

from pagesim import datapaths
from pagesim.cli import main
from pagesim.workloads.lengthtable import load_table


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code, err, needle):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pagesim: error:")
    assert needle in lines[0]


def test_list(capsys):
    code, out, _ = _run(capsys, "workload", "list")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    for name in ("sharegpt", "sharegpt-first-turn", "sharegpt-chat", "alpaca-like", "azure-conv",
                 "azure-code", "synthetic", "csv"):  # fmt: skip
        assert name in names
    assert "SYNTHETIC" in out


def test_stats_csv_and_synthetic(capsys, data_dir):
    code, out, _ = _run(
        capsys, "workload", "stats", "csv", "--path", str(data_dir / "trace_processed.csv")
    )
    assert code == 0 and "requests: 40" in out
    code, out, _ = _run(
        capsys, "workload", "stats", "azure-conv", "--source", str(data_dir / "trace_processed.csv")
    )
    assert code == 0 and "requests: 40" in out and "dropped prompt_len > 1024: " in out
    code, out, _ = _run(capsys, "workload", "stats", "alpaca-like")
    assert code == 0 and "sample: 10,000 requests" in out


def test_prepare_csv_atomic_and_to_out(capsys, data_dir, tmp_path):
    out_file = tmp_path / "conv.npz"
    code, out, _ = _run(capsys, "workload", "prepare", "azure-conv",
                        "--source", str(data_dir / "trace_processed.csv"), "--out", str(out_file))  # fmt: skip
    assert code == 0 and "40 rows" in out
    assert len(load_table(out_file)) == 40


def test_prepare_writes_into_the_data_folder_and_the_workload_reads_it(capsys, data_dir):
    folder = datapaths.data_dir()
    assert not (folder / "azure_conv.npz").exists()
    code, _, err = _run(capsys, "workload", "stats", "azure-conv")
    _one_line_error(code, err, "azure_conv.npz not found in the data folder")
    code, out, _ = _run(capsys, "workload", "list")
    assert "AzureLLMInferenceTrace_conv.csv" in out and str(folder) in out
    code, out, _ = _run(capsys, "workload", "prepare", "azure-conv",
                        "--source", str(data_dir / "trace_processed.csv"))  # fmt: skip
    assert code == 0 and f"wrote {folder / 'azure_conv.npz'}: 40 rows" in out
    code, out, _ = _run(capsys, "workload", "stats", "azure-conv")
    assert code == 0 and "requests: 40 (raw table, no filters)" in out


def test_prepare_sharegpt_excerpt(capsys, data_dir, tmp_path):
    pytest.importorskip("tokenizers")
    out_file = tmp_path / "sg.npz"
    code, out, _ = _run(capsys, "workload", "prepare", "sharegpt",
                        "--source", str(data_dir / "sharegpt_sample_truncated.json"), "--out", str(out_file))  # fmt: skip
    assert code == 0 and "truncated" in out
    assert load_table(out_file).conv_ids.tolist() == [0, 1, 2, 3, 3, 3, 4, 4, 4, 5, 6, 7]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["workload", "stats", "nope"], "unknown workload 'nope'; known:"),
        (["workload", "stats", "csv"], "needs workload.path"),
        (["workload", "stats", "csv", "--path", "missing.csv"], "missing.csv: file not found"),
        (
            ["workload", "stats", "azure-conv", "--max-model-len", "0"],
            "--max-model-len must be >= 1",
        ),
        (["workload", "prepare", "synthetic", "--source", "x"], "no length table to prepare"),
        (["workload", "prepare", "nope", "--source", "x"], "unknown workload"),
    ],
)
def test_user_errors_are_one_line(capsys, argv, needle):
    code, _, err = _run(capsys, *argv)
    _one_line_error(code, err, needle)


@pytest.mark.parametrize(
    ("name", "filename", "body", "needle"),
    [
        (
            "azure-conv",
            "bad.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0,5,-2\n",
            "bad.csv: line 2",
        ),
        ("azure-conv", "bad.csv", "arrived_at,num_prefill_tokens\n0,5\n", "unknown CSV header"),
        ("sharegpt", "bad.json", '[{"id": "a", "conversations": 3}]', "bad.json: record 0"),
        ("alpaca", "bad.json", '[{"instruction": 1}]', "bad.json: record 0"),
    ],
)
def test_prepare_bad_source_writes_nothing(capsys, tmp_path, name, filename, body, needle):
    if name != "azure-conv":
        pytest.importorskip("tokenizers")
    src = tmp_path / filename
    src.write_text(body)
    out_file = tmp_path / "out" / "table.npz"
    code, _, err = _run(
        capsys, "workload", "prepare", name, "--source", str(src), "--out", str(out_file)
    )
    _one_line_error(code, err, needle)
    assert not out_file.exists() and not out_file.parent.exists()


def test_prepare_missing_source_and_tokenizer_for_csv(capsys, tmp_path, data_dir):
    code, _, err = _run(capsys, "workload", "prepare", "sharegpt", "--source", str(tmp_path / "none.json"),
                        "--out", str(tmp_path / "t.npz"))  # fmt: skip
    _one_line_error(code, err, "none.json: file not found")
    code, _, err = _run(capsys, "workload", "prepare", "azure-code", "--source",
                        str(data_dir / "trace_processed.csv"), "--tokenizer", "x", "--out",
                        str(tmp_path / "t.npz"))  # fmt: skip
    _one_line_error(code, err, "drop --tokenizer")
    assert not (tmp_path / "t.npz").exists()
