"""Every band a paper test holds (tests/bands.py) can fail: the check passes on the paper's
own value and fails on a value moved just outside the band, below and above."""

from __future__ import annotations

import pytest
from bands import BANDS, Band


@pytest.mark.parametrize("key", list(BANDS), ids=["/".join(k) for k in BANDS])
def test_the_band_fails_when_the_value_is_moved_outside_it(key):
    band = BANDS[key]
    assert band.holds(band.paper)
    below, above = band.just_outside()
    for moved in (below, above):
        assert not band.holds(moved)
        with pytest.raises(AssertionError, match="off by"):
            band.check(moved, "/".join(key))


def test_a_band_has_a_width():
    with pytest.raises(AssertionError):
        Band(1.0, 0.0)
    assert Band(2.0, 0.1, relative=True).half_width == pytest.approx(0.2)
