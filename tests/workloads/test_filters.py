import numpy as np

from pagesim.workloads.filters import apply_filters


def test_each_request_counted_under_its_first_broken_rule():
    prompt = np.array([2, 10, 2000, 900, 500, 1024])
    output = np.array([1, 1, 5, 1500, 100, 1024])
    keep, dropped = apply_filters(
        prompt, output, min_len=4, max_prompt_len=1024, max_model_len=2048
    )
    assert keep.tolist() == [False, False, False, False, True, True]
    assert dropped == {
        "prompt_len < 4": 1,
        "output_len < 4": 1,
        "prompt_len > 1024": 1,
        "prompt_len + output_len > 2048": 1,
    }


def test_disabled_limits_drop_nothing_more():
    prompt, output = np.array([5000, 3]), np.array([5000, 3])
    keep, dropped = apply_filters(
        prompt, output, min_len=1, max_prompt_len=None, max_model_len=None
    )
    assert keep.all() and dropped == {}
