"""The float-noise comparison of regenerated files (tests/numtext.py) can fail."""

from numtext import float_noise_diff


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
