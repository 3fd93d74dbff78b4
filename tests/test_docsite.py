"""The docs site (mkdocs.yml): its nav lists every page, and its build steps (docsite/).

``tasks.py test`` builds the site itself, strictly; these tests say what that build
does not: a page missing from the nav is found here by name (the build only warns that
it is "not included in the nav").
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(
        f"docsite_{name}", ROOT / "docsite" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_paths(nav) -> list[str]:
    """Every page path in mkdocs.yml's nav, depth-first."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_paths(value)]
    return [p for item in nav for p in _nav_paths(item)]


@pytest.fixture(scope="module")
def nav() -> list[str]:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `docs` extra)")
    from mkdocs.utils.yaml import yaml_load

    with open(ROOT / "mkdocs.yml", encoding="utf-8") as f:
        return _nav_paths(yaml_load(f)["nav"])


def test_nav_lists_every_page(nav: list[str]):
    """Every page of docs/ (and the README, the notebooks, the API reference's pages)."""
    hooks = _module("hooks")
    pages = [p for p in hooks.site_sources() if p.endswith((".md", ".ipynb"))]
    assert {"README.md", "docs/index.md", "docs/guide.md"} <= set(pages)
    assert any(p.startswith("notebooks/") for p in pages)
    missing = [p for p in pages if p not in nav]
    assert not missing, f"pages not in mkdocs.yml's nav: {missing}"


def test_nav_names_only_pages_that_exist(nav: list[str]):
    absent = [p for p in nav if not (ROOT / p).is_file()]
    assert not absent, f"mkdocs.yml's nav names files that do not exist: {absent}"
    repeated = sorted({p for p in nav if nav.count(p) > 1})
    assert not repeated, f"mkdocs.yml's nav lists these twice: {repeated}"


def test_sphinx_roles_become_markdown():
    pytest.importorskip("griffe", reason="griffe is not installed (the `docs` extra)")
    markdown_of = _module("sphinx_roles").markdown_of
    text = "See :func:`pagesim.api.simulate` and :class:`~pagesim.spec.RunSpec`.\n"
    assert markdown_of(text) == "See `pagesim.api.simulate` and `RunSpec`.\n"
    assert markdown_of("A profile is YAML::\n\n    a: 1\n") == "A profile is YAML:\n\n    a: 1\n"
    assert markdown_of("Scenario ::\n\n    x\n::\n\n    y\n") == "Scenario\n\n    x\n\n\n    y\n"
    assert markdown_of("``code`` and *emphasis*") == "``code`` and *emphasis*"


def test_the_package_is_laid_out_as_imported(tmp_path: Path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `docs` extra)")
    hooks = _module("hooks")
    hooks.lay_out_package(tmp_path)
    for module in ("api", "simulator/spec", "simulator/costmodel/profile",
                   "simulator/schedulers/base", "allocators/base", "records/run",
                   "experiments/validation/pipeline"):  # fmt: skip
        assert (tmp_path / "pagesim" / f"{module}.py").is_file(), module
    assert not list(tmp_path.rglob("*.so"))


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_notebook_cells_have_ids(path: Path):
    """nbformat 4.5's cell ids: without them nbformat warns (MissingIDFieldWarning) when
    the site converts the notebook, and will refuse it in a future version."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5)
    ids = [cell.get("id") for cell in nb["cells"]]
    assert None not in ids, (
        f"{path.name}: cells {[i for i, c in enumerate(ids) if c is None]} lack an id"
    )
    assert len(set(ids)) == len(ids), f"{path.name}: repeated cell ids"
