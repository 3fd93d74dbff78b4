"""The docs site's build steps that mkdocs.yml cannot say (mkdocs hooks, named there).

The site holds the repository's own files at their paths in the repository, so that
every relative link between them works unchanged both on GitHub and in the built site
(``docs/index.md`` links ``../README.md`` and ``../notebooks/01_why_paging.ipynb``, the
README links ``docs/guide.md``):

- ``README.md``, the home page (mkdocs renders a README as its folder's index);
- ``docs/**``, the documentation;
- ``notebooks/*.ipynb``, which mkdocs-jupyter renders;
- ``docsite/api/*.md``, the API reference's pages (mkdocstrings' ``:::`` blocks, which
  mean nothing on GitHub, so they are not under ``docs/``).

mkdocs itself collects only ``docs_dir`` (``docs/``), with paths relative to it; ``on_files``
replaces that collection with the layout above. It runs before mkdocs-jupyter's own
``on_files``, which turns the ``.ipynb`` files it is given into pages.

mkdocstrings reads the package with griffe, statically, from a folder laid out as the
package is imported: pagesim's subpackages live in top-level folders of the repository
(``[tool.setuptools.package-dir]`` maps ``pagesim.simulator`` to ``simulator/``), which
griffe's finder does not follow, so ``on_config`` copies the package's ``.py`` files into
``build/docs-api/pagesim/`` along that mapping (the compiled ``.so`` beside them are left
out: the reference is read from the sources).
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
#: where on_config lays the package out for griffe (mkdocs.yml's mkdocstrings ``paths``)
API_SOURCES = ROOT / "build" / "docs-api"


def site_sources() -> list[str]:
    """The path, in the repository and in the site, of every file the site is built
    from: the layout in the module docstring."""
    hidden = lambda p: any(part.startswith(".") for part in p.relative_to(ROOT).parts)  # noqa: E731
    files = [ROOT / "README.md"]
    files += [p for p in sorted((ROOT / "docs").rglob("*")) if p.is_file() and not hidden(p)]
    files += sorted((ROOT / "notebooks").glob("*.ipynb"))
    files += sorted((ROOT / "docsite" / "api").glob("*.md"))
    return [p.relative_to(ROOT).as_posix() for p in files]


def package_folders() -> dict[str, Path]:
    """Each package of pagesim and the folder its modules are in (pyproject's mapping)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        tool = tomllib.load(f)["tool"]["setuptools"]
    mapping = tool["package-dir"]
    folders = {}
    for package in tool["packages"]:
        parent, _, name = package.rpartition(".")
        if package in mapping:
            folders[package] = ROOT / mapping[package]
        else:  # a subpackage not mapped lies in its parent's folder
            folders[package] = folders[parent] / name
    return folders


def lay_out_package(target: Path = API_SOURCES) -> None:
    """Copy every package's ``.py`` files to ``target/pagesim/...``, as imported."""
    shutil.rmtree(target, ignore_errors=True)
    for package, folder in package_folders().items():
        dest = target.joinpath(*package.split("."))
        dest.mkdir(parents=True, exist_ok=True)
        for source in folder.glob("*.py"):
            shutil.copy2(source, dest / source.name)


@event_priority(100)  # before mkdocstrings' on_config, which reads its paths
def on_config(config):
    lay_out_package()
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files (priority 0)
def on_files(files: Files, config) -> Files:
    docs_dir = Path(config.docs_dir).resolve()
    # theme assets and anything a plugin added stay; docs_dir's files come back below
    kept = [f for f in files if f.src_dir is None or Path(f.src_dir).resolve() != docs_dir]
    ours = [
        File(path, str(ROOT), config.site_dir, config.use_directory_urls) for path in site_sources()
    ]
    return Files(kept + ours)
