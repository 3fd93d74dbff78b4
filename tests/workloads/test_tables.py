"""The shipped ShareGPT table (built from the PyPI package) reproduces its source's numbers."""

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
