"""The float-noise comparison of regenerated files (tests/numtext.py) can fail."""

from numtext import float_noise_diff, page_diff


def test_last_digits_pass_and_real_changes_fail():
    shipped = "const_s: 0.003761613107303655\nmape: 2.19% of 20 points\n"
    assert (
        float_noise_diff("const_s: 0.0037616131065513606\nmape: 2.19% of 20 points\n", shipped)
        is None
    )
    assert "number differs" in float_noise_diff(
        "const_s: 0.00377\nmape: 2.19% of 20 points\n", shipped
    )
    assert "number differs" in float_noise_diff(
        "const_s: 0.003761613107303655\nmape: 2.20% of 20 points\n", shipped
    )
    assert "text differs" in float_noise_diff(
        "const_s: 0.003761613107303655\nmape: 2.19% of 21 points!\n", shipped
    )
    assert "text differs" in float_noise_diff(
        "s_per_seq: 0.003761613107303655\nmape: 2.19% of 20 points\n", shipped
    )


def test_page_diff_allows_a_fits_float_noise_and_catches_a_real_change():
    page = "| ctx | no | 15.41 | 2.19% | 14.01% |\n"
    assert page_diff("| ctx | no | 15.36 | 2.19% | 13.99% |\n", page) is None
    assert "15.0" in page_diff("| ctx | no | 15.0 | 2.19% | 14.01% |\n", page)
    assert "text differs" in page_diff("| seq | no | 15.41 | 2.19% | 14.01% |\n", page)
