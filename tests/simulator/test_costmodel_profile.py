"""The profile file: round-trip and every way a profile can be rejected."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pagesim.errors import ConfigError
from pagesim.simulator.costmodel import analytic_profile, load_profile, profile_from_dict
from pagesim.simulator.model_gpu_specs import get_gpu

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_profile.yaml"


def _doc() -> dict:
    return yaml.safe_load(FIXTURE.read_text())


def test_fixture_loads_with_every_term():
    p = load_profile(FIXTURE)
    assert p.kind == "measured" and p.gpu_spec == "a100-40gb"
    assert p.term("gemm").coef("s_per_flop") == 5e-15
    assert p.term("gemm").heldout_mape == 0.05 and p.term("gemm").num_points == 10
    assert p.term("swap").coef("const_s") == 0.0  # missing coefficients are 0


@pytest.mark.parametrize("profile_of", ["fixture", "analytic"])
def test_save_load_round_trip(tmp_path, profile_of):
    p = load_profile(FIXTURE) if profile_of == "fixture" else analytic_profile(get_gpu("h100-sxm"))
    out = p.save(tmp_path / "sub" / "profile.yaml")
    assert load_profile(out) == p


def test_unquoted_yaml_date_is_accepted_as_iso_text():
    doc = _doc()
    doc["date"] = __import__("datetime").date(2024, 1, 1)
    assert profile_from_dict(doc).date == "2024-01-01"


def _set(doc, path, value):
    *parents, last = path
    for key in parents:
        doc = doc[key]
    doc[last] = value


@pytest.mark.parametrize(
    "path, value, fragment",
    [
        (("colour",), "red", "unknown key 'colour'"),
        (("kind",), "guessed", "kind: 'guessed' is not one of"),
        (("gpu_name",), 42, "gpu_name: must be a string"),
        (("date",), 3.5, "date: must be a date string"),
        (("schema_version",), 2, "schema_version 2 is not supported"),
        (("terms",), [], "terms must be a mapping"),
        (("terms", "warp_drive"), {"coefficients": {}}, r"terms\.warp_drive: unknown term"),
        (
            ("terms", "gemm", "coefficients", "s_per_byte"),
            -1.0,
            r"gemm\.coefficients\.s_per_byte: must be a finite number >= 0",
        ),
        (("terms", "gemm", "coefficients", "s_per_byte"), "fast", "must be a finite number >= 0"),
        (
            ("terms", "gemm", "coefficients", "s_per_byte"),
            float("nan"),
            "must be a finite number >= 0",
        ),
        (("terms", "gemm", "coefficients", "s_per_byte"), True, "must be a finite number >= 0"),
        (("terms", "gemm", "coefficients", "s_per_parsec"), 1.0, r"s_per_parsec: unknown; allowed"),
        (("terms", "gemm", "fitted_by"), "me", r"terms\.gemm: unknown key 'fitted_by'"),
        (("terms", "gemm", "heldout_mape"), "low", r"heldout_mape: must be a number or null"),
        (("terms", "gemm", "num_points"), 2.5, r"num_points: must be an integer >= 0"),
        (
            ("terms", "gemm"),
            {"const_s": 1.0},
            r"terms\.gemm: expected a mapping with 'coefficients'",
        ),
        (("software",), "cupy 13", "software must be a mapping"),
    ],
)
def test_bad_profiles_are_rejected_by_name(tmp_path, path, value, fragment):
    doc = _doc()
    _set(doc, path, value)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=fragment) as info:
        load_profile(f)
    assert str(f) in str(info.value)


@pytest.mark.parametrize("key", ["kind", "gpu_name", "gpu_spec", "terms"])
def test_missing_required_key(key):
    doc = _doc()
    del doc[key]
    with pytest.raises(ConfigError, match=f"missing key '{key}'"):
        profile_from_dict(doc, "p.yaml")


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="profile file not found"):
        load_profile(tmp_path / "nope.yaml")
    f = tmp_path / "broken.yaml"
    f.write_text("terms: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_profile(f)
    f.write_text("- just a list")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_profile(f)


def test_asking_for_an_absent_term_names_the_ones_present():
    p = profile_from_dict({"kind": "measured", "gpu_name": "x", "gpu_spec": "h200", "terms": {}})
    with pytest.raises(ConfigError, match="has no term 'gemm'"):
        p.term("gemm")


def test_a_profile_file_is_parsed_once_per_content(tmp_path):
    """Loading the same bytes again returns the parsed profile; a file rewritten with other
    contents (same path) is parsed again, never served stale."""
    from dataclasses import replace

    path = tmp_path / "p.yaml"
    first = load_profile(FIXTURE)
    first.save(path)
    loaded = load_profile(path)
    assert load_profile(path) is loaded
    replace(first, notes="rewritten").save(path)
    assert load_profile(path).notes == "rewritten"
    first.save(path)
    assert load_profile(path).notes == first.notes
