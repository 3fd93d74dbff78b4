#!/usr/bin/env python3
"""Set up and run pagesim with nothing but Python 3.11+ and pip on the machine.

    python3 tasks.py run     # set up, then run the default experiment (memory_waste)
    python3 tasks.py test    # set up, then lint and run the test suite
    python3 tasks.py bench   # set up, then run every benchmark under benchmarks/

Set-up makes a virtual environment in .venv (once) and installs pagesim into it in
editable mode with the extras the task needs. Extra arguments after the task are
passed on (``python3 tasks.py run --quick``; ``python3 tasks.py test -k paged``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
EXTRAS = {"run": "", "test": "[dev,cluster]", "bench": ""}


def sh(*cmd: str | Path) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True)


def setup(extras: str) -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - runs under the system python, before the venv exists
        sys.exit(f"pagesim needs Python 3.11+, this is {sys.version.split()[0]}")
    if not (BIN / "python").exists():
        print(f"creating virtual environment {VENV.name}/", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    stamp_key = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + (ROOT / "setup.py").read_bytes() + extras.encode()
    ).hexdigest()
    stamp = VENV / f".pagesim-installed-{stamp_key[:16]}"
    # installing compiles the engine's modules (setup.py); pagesim._native says when a
    # source changed since, and installing again compiles it
    if not stamp.exists() or "changed since it was compiled" in engine_modules():
        sh(BIN / "python", "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        sh(BIN / "python", "-m", "pip", "install", "--quiet", "-e", f".{extras}")
        stamp.touch()
    compile_bytecode()
    # whether the install compiled them (pip's --quiet hides setup.py's word)
    print(f"pagesim's engine modules: {engine_modules()}", flush=True)


def engine_modules() -> str:
    """``pagesim._native.status`` in the virtual environment (or why it cannot say)."""
    out = subprocess.run(
        [str(BIN / "python"), "-c", "from pagesim import _native; print(_native.status)"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or out.stderr.strip()


def compile_bytecode() -> None:
    """Write the package's bytecode, as pip does for a regular install (an editable
    install leaves it to the first import, and with PYTHONDONTWRITEBYTECODE set no
    import writes it): each start then reads .pyc files instead of compiling every
    module. Only files changed since are compiled again."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        package_dirs = tomllib.load(f)["tool"]["setuptools"]["package-dir"].values()
    sh(BIN / "python", "-m", "compileall", "-q", *sorted(set(package_dirs)))


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in EXTRAS:
        print(__doc__)
        return 2
    task, rest = argv[0], argv[1:]
    setup(EXTRAS[task])
    try:
        if task == "run":
            sh(
                BIN / "pagesim",
                "run",
                "experiments/memory_waste.yaml",
                "--out",
                "out/memory_waste",
                *rest,
            )
        elif task == "test":
            sh(BIN / "ruff", "check", ".")
            sh(BIN / "python", "-m", "pytest", "-q", "-n", "2", *rest)
            # the engine's modules as Python (what an edited checkout runs), for the
            # tests that patch them (marked pure_python) and the golden files
            os.environ["PAGESIM_PURE_PYTHON"] = "1"
            print("+ PAGESIM_PURE_PYTHON=1 (the engine's modules from their sources)", flush=True)
            pytest = [BIN / "python", "-m", "pytest", "-q", "-n", "2"]
            passes = [[*pytest, "-m", "pure_python", *rest]]
            if not rest:
                passes.append([*pytest, "tests/simulator/test_goldens.py"])
            for cmd in passes:
                print("+", " ".join(str(c) for c in cmd), flush=True)
                code = subprocess.run([str(c) for c in cmd], cwd=ROOT).returncode
                if code not in (0, 5):  # 5: the arguments selected no such test
                    return code
        elif task == "bench":
            for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
                sh(BIN / "python", script, *rest)
    except subprocess.CalledProcessError as exc:
        return exc.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
