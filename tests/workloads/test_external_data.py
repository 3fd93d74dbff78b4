"""External data: the data folder, the one-line "what to fetch" error, and the real files.

The real-data tests read the team's shared copies (``../shared/data``, see
``tests/conftest.py``), prepare them into the test's data folder with the same
command a user runs, and check the numbers their publishers give; they skip, with
a one-line reason, where the shared data is absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pagesim import datapaths
from pagesim.cli import main
from pagesim.errors import ConfigError, DataError
from pagesim.workloads import WORKLOADS, build_trace
from pagesim.workloads.registry import load_rows
from pagesim.workloads.spec import ArrivalSpec, WorkloadSpec


def test_data_folder_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("PAGESIM_DATA", str(tmp_path / "mine"))
    assert datapaths.data_dir() == tmp_path / "mine"
    monkeypatch.delenv("PAGESIM_DATA")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert datapaths.data_dir() == tmp_path / "xdg" / "pagesim"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert datapaths.data_dir() == tmp_path / "home" / ".local" / "share" / "pagesim"


def test_every_external_workload_names_a_registered_dataset():
    external = {n: s.dataset for n, s in WORKLOADS.items() if s.dataset is not None}
    assert external == {
        "alpaca": "alpaca",
        "alpaca-5000": "alpaca-5000",
        "azure-conv": "azure-conv",
        "azure-code": "azure-code",
        "sharegpt-paper": "sharegpt-paper",
    }
    for dataset in datapaths.EXTERNAL_DATASETS.values():
        assert dataset.url.startswith("https://") and dataset.url.endswith(dataset.raw_file)
        assert dataset.prepare_command == f"pagesim workload prepare {dataset.name}"


@pytest.mark.parametrize(
    "name", ["azure-conv", "azure-code", "alpaca", "alpaca-5000", "sharegpt-paper"]
)
def test_missing_table_says_what_to_download_and_how_to_prepare(name):
    with pytest.raises(DataError) as info:
        build_trace(WorkloadSpec(name=name), ArrivalSpec(), max_model_len=2048,
                    rng=np.random.default_rng(0))  # fmt: skip
    message = str(info.value)
    dataset = datapaths.get_dataset(name)
    assert "\n" not in message
    assert str(datapaths.data_dir()) in message and "PAGESIM_DATA" in message
    assert f"download {dataset.raw_file}" in message and dataset.url in message
    assert f"pagesim workload prepare {name} --source {dataset.raw_file}" in message
    # preparing a text file tokenizes it: the tokenizer's extra comes first
    install = "run: pip install 'pagesim[prepare]' (the tokenizer), then pagesim workload"
    assert (install in message) == name.startswith("alpaca"), message


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(
        ConfigError, match="unknown external dataset 'nope'; known: alpaca, alpaca-5000, azure-code"
    ):
        datapaths.get_dataset("nope")


def _prepare(name: str, source: Path) -> None:
    assert main(["workload", "prepare", name, "--source", str(source)]) == 0


@pytest.mark.parametrize(
    ("name", "file", "count", "prompt_mean", "output_mean", "span_s"),
    [
        ("azure-conv", "conv.csv", 19_366, 1154.7, 211.1, 3501.7),
        ("azure-code", "code.csv", 8_819, 2047.8, 27.9, 3435.9),
    ],
)
def test_azure_tables_from_the_real_trace(
    shared_data, capsys, name, file, count, prompt_mean, output_mean, span_s
):
    _prepare(name, shared_data("azure_llm_2023", file))
    assert (datapaths.data_dir() / datapaths.get_dataset(name).table_file).is_file()
    table = load_rows(name)
    assert len(table) == count
    assert round(table.prompt_len.mean(), 1) == prompt_mean
    assert round(table.output_len.mean(), 1) == output_mean
    assert table.arrival_s[0] == 0.0 and (np.diff(table.arrival_s) >= 0).all()
    assert round(float(table.arrival_s[-1]), 1) == span_s


def test_azure_conv_replay_and_stats(shared_data, capsys):
    _prepare("azure-conv", shared_data("azure_llm_2023", "conv.csv"))
    trace = build_trace(
        WorkloadSpec(name="azure-conv", num_requests=None, max_prompt_len=None, min_len=1),
        ArrivalSpec(process="replay"), max_model_len=1_000_000, rng=np.random.default_rng(0),
    )  # fmt: skip
    assert len(trace) == 19_366
    assert trace.table["arrival_s"].iloc[-1] == pytest.approx(3501.72, abs=0.01)
    capsys.readouterr()
    assert main(["workload", "stats", "azure-conv"]) == 0
    out = capsys.readouterr().out
    assert "requests: 19,366 (raw table, no filters)" in out
    assert "prompt_len: mean 1,154.7" in out and "output_len: mean 211.1" in out
    assert "mean rate 5.53 req/s" in out
    assert "would keep 9,832 of 19,366" in out and "dropped prompt_len > 1024: 9,528" in out


def test_workload_path_reads_the_raw_file_directly(shared_data):
    """``workload.path`` (a YAML key) needs no preparation: the raw CSV is read as is."""
    conv = shared_data("azure_llm_2023", "conv.csv")
    assert len(load_rows("azure-conv", str(conv))) == 19_366


@pytest.mark.parametrize("name", ["alpaca", "alpaca-5000"])
def test_alpaca_sample_means_from_the_real_data(shared_data, capsys, name):
    """The sample prepares as the full-data workload ``alpaca`` or as ``alpaca-5000``, the
    name the paper experiments read (so a user's full 52,002-record table never stands in)."""
    pytest.importorskip("tokenizers")
    _prepare(name, shared_data("alpaca", "alpaca_5000.json"))
    table = load_rows(name)
    # the shared data's README: GPT-2 BPE means 17.96 (instruction + "\n" + input) / 58.55
    assert len(table) == 5000
    assert round(table.prompt_len.mean(), 2) == 17.96
    assert round(table.output_len.mean(), 2) == 58.55
