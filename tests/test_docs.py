"""The user documentation: every relative link resolves, and docs/cli.md is up to date."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pagesim.docgen import cli_reference, main

ROOT = Path(__file__).resolve().parents[1]
PAGES = (
    sorted((ROOT / "docs").glob("*.md"))
    + [ROOT / "README.md"]
    # the docs site's API reference pages (mkdocs.yml)
    + sorted((ROOT / "docsite" / "api").glob("*.md"))
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [a or b for a, b in LINK.findall(text)]


def _anchors(page: Path) -> set[str]:
    """GitHub-style anchors of the page's headings (lowercase, punctuation dropped, - for space)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    headings = re.findall(r"^#+\s+(.*?)\s*$", text, re.M)
    return {
        "".join(ch for ch in h.lower() if ch.isalnum() or ch in " -_").replace(" ", "-")
        for h in headings
    }


def _is_external(target: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*:", target) is not None


def test_the_pages_exist():
    names = {p.name for p in PAGES}
    assert {"index.md", "guide.md", "cli.md", "fidelity.md", "README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path):
    broken = []
    for target in _links(page):
        if _is_external(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(
                f"{target} (no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest})"
            )
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading with anchor #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_link_checker_sees_a_broken_link(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("see [a](missing.md), [b](https://example.org) and ![c](img.png)\n")
    assert _links(page) == ["missing.md", "https://example.org", "img.png"]


def test_cli_reference_is_up_to_date():
    committed = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == cli_reference(), (
        "docs/cli.md is out of date: regenerate it with "
        "`python -m pagesim.docgen --write docs/cli.md`"
    )


def test_cli_reference_covers_every_command():
    text = cli_reference()
    for command in ("run", "validate", "list", "simulate", "workload stats", "calibrate report"):
        assert f"## pagesim {command}\n" in text


def test_docgen_writes_the_file(tmp_path: Path):
    out = tmp_path / "cli.md"
    assert main(["--write", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == cli_reference()
