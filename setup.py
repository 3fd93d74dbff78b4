"""Build pagesim: the engine's hot modules compiled by mypyc, or pure Python.

Every simulation step runs through the modules in ``COMPILED`` (the engine, the
schedulers, the allocators, the recorder, the cost model's step formulas). mypyc
compiles them, from the same Python sources, into C extensions that run the same
operations in the same order, faster (``docs/performance.md``). The rest of the package
stays Python.

- ``PAGESIM_PURE_PYTHON=1`` when installing: nothing is compiled.
- No C compiler, or mypyc fails: the install goes on pure Python (why: in the
  build log, `pip install -v`).
- After the build, ``pagesim/_compiled.json`` records a hash of each compiled module's
  source; at import, ``pagesim/_native.py`` runs the pure-Python modules instead of the
  compiled ones when any source differs from its hash (an edited scheduler runs as
  edited, with a warning that says how to compile it again) or when
  ``PAGESIM_PURE_PYTHON=1`` is set at run time.

Everything else about the package (its modules, data and entry points) is in
pyproject.toml.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tomllib
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "pagesim"))
from _native import COMPILED, source_hash  # noqa: E402  (pagesim/_native.py, no imports)

sys.path.pop(0)

#: where the sources are laid out as the installed package (mypyc names modules by path)
TREE = ROOT / "build" / "mypyc-src"


with open(ROOT / "pyproject.toml", "rb") as f:
    SETUPTOOLS = tomllib.load(f)["tool"]["setuptools"]


def package_dir(package: str) -> Path:
    """A package's directory in the repository (pyproject's ``package-dir``; a package
    not listed there is a folder of the nearest one that is)."""
    mapping = SETUPTOOLS["package-dir"]
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            return ROOT / mapping[prefix] / Path(*parts[i:])
    raise KeyError(f"pyproject.toml: no package-dir for {package}")


def source_path(module: str) -> Path:
    """The repository file of a module (``pagesim.allocators.paged`` -> allocators/paged.py)."""
    package, _, name = module.rpartition(".")
    return package_dir(package) / f"{name}.py"


def lay_out_tree() -> list[str]:
    """Copy every package's Python files to ``TREE`` under their module paths; return
    the copies of the modules to compile."""
    if TREE.exists():
        shutil.rmtree(TREE)
    for package in SETUPTOOLS["packages"]:
        target = TREE / package.replace(".", "/")
        target.mkdir(parents=True, exist_ok=True)
        for source in package_dir(package).glob("*.py"):
            shutil.copy2(source, target / source.name)
    return [str(TREE / (module.replace(".", "/") + ".py")) for module in COMPILED]


class BuildWithStamp(build_ext):
    """build_ext, then ``pagesim/_compiled.json``: each compiled module's source hash."""

    def run(self) -> None:
        try:
            super().run()
        except (CCompilerError, ExecError, PlatformError, OSError) as exc:  # no C compiler
            print(f"pagesim: not compiled ({type(exc).__name__}: {exc}); installing pure Python")
            return  # no stamp: pagesim._native runs every module from source
        if not self.extensions:
            return
        stamp = {module: source_hash(source_path(module).read_bytes()) for module in COMPILED}
        # in place (an editable install) beside the sources, else in the build to install
        target = package_dir("pagesim") if self.inplace else Path(self.build_lib) / "pagesim"
        target.mkdir(parents=True, exist_ok=True)
        (target / "_compiled.json").write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")


def extensions() -> list:
    if os.environ.get("PAGESIM_PURE_PYTHON") == "1":
        print("pagesim: PAGESIM_PURE_PYTHON=1: installing pure Python", flush=True)
        return []
    try:
        from mypyc.build import mypycify

        # the same build whatever the environment holds: no installed package's types
        # (numpy, simpy, pandas are Any) and no cache from an earlier build
        cache = ROOT / "build" / "mypyc-cache"
        if cache.exists():
            shutil.rmtree(cache)
        options = ["--no-site-packages", "--ignore-missing-imports", "--follow-imports=silent"]
        return mypycify(
            [*options, "--cache-dir", str(cache), *lay_out_tree()],
            opt_level="3",
            target_dir=str(ROOT / "build" / "mypyc"),
            group_name="pagesim._native",
        )
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failure leaves a pure build
        print(f"pagesim: not compiled ({type(exc).__name__}: {exc}); installing pure Python")
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildWithStamp})
