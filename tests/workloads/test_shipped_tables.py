"""The shipped length tables reproduce their sources' published numbers."""

import numpy as np
import pytest

from pagesim.workloads.registry import load_rows


def test_sharegpt_pairs_mean_output_near_333():
    table = load_rows("sharegpt")
    assert len(table) == 61_223
    assert table.output_len.mean() == pytest.approx(333, rel=0.05)


def test_sharegpt_first_turn_is_one_row_per_conversation():
    assert len(load_rows("sharegpt-first-turn")) == len(
        np.unique(load_rows("sharegpt-chat").conv_ids)
    )


@pytest.mark.parametrize(
    ("name", "count", "prompt_mean", "output_mean"),
    [("azure-conv", 19_366, 1154.7, 211.1), ("azure-code", 8_819, 2047.8, 27.9)],
)
def test_azure_tables(name, count, prompt_mean, output_mean):
    table = load_rows(name)
    assert len(table) == count
    assert round(table.prompt_len.mean(), 1) == prompt_mean
    assert round(table.output_len.mean(), 1) == output_mean
    assert table.arrival_s[0] == 0.0 and (np.diff(table.arrival_s) >= 0).all()
