#!/usr/bin/env python3
"""Set up and run pagesim with nothing but Python 3.11+ and pip on the machine.

    python3 tasks.py run     # set up, then run the default experiment (memory_waste)
    python3 tasks.py test    # set up, then lint and run the test suite (every stage,
                             # each one's result reported; non-zero if any failed)
    python3 tasks.py bench   # set up, then run every benchmark under benchmarks/
    python3 tasks.py docs    # set up, regenerate docs/cli.md and docs/experiments.md,
                             # then build the docs site into site/ (notebooks executed)

    python3 tasks.py gpu-wheels      # here: the wheels a GPU machine without an index needs
    python3 tasks.py gpu-calibrate   # there: calibrate in one call (--dry-run: on a CPU)

Set-up makes a virtual environment in .venv (once) and installs pagesim into it in
editable mode with the extras the task needs. Extra arguments after the task are
passed on (``python3 tasks.py run --quick``; ``python3 tasks.py test -k paged``).

The two GPU tasks serve a GPU machine that is lent for minutes and reaches no package
index, whose Python (3.12) has numpy, pandas, matplotlib, pyyaml, tqdm and CuPy but not
pagesim's other dependencies (docs/calibration.md, "When a GPU is available"):

- ``gpu-wheels`` downloads those dependencies' wheels for that Python and platform into
  ``gpu_wheels/`` (not in git), with the CUDA headers of the local toolkit (NVRTC needs
  ``cuda_fp16.h``; used there only if CuPy finds none) and a manifest.
- ``gpu-calibrate [--out DIR] [--budget-s S] [--iterations-budget-s S] [--dry-run] [ARGS]``
  runs there, with no
  virtual environment: it installs the carried wheels that this Python lacks into
  ``build/gpu-site-<python>`` (pip ``--no-index``, or unpacking them where pip is
  missing or refuses), then runs ``pagesim calibrate``
  from the sources (``PAGESIM_PURE_PYTHON=1``; the package's folders are found through
  ``pagesim.__path__``) with a time budget, into DIR (default ``$OUT``), teeing everything
  to ``DIR/run.log``. ARGS go to ``pagesim calibrate``. Then, where that Python has
  PyTorch and sees the GPU, ``benchmarks/gpu_iterations.py`` times whole model steps into
  ``DIR/iterations.csv`` for ``--iterations-budget-s`` seconds (default 180; 0: skip),
  for ``pagesim calibrate iterations``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import venv
import zipfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
EXTRAS = {"run": "", "test": "[dev,cluster,docs]", "bench": "", "docs": "[docs]"}

GPU_WHEELS = ROOT / "gpu_wheels"
GPU_SITE = ROOT / "build" / "gpu-site"
GPU_CUDA_INCLUDE = ROOT / "build" / "cuda-include"
CUDA_HEADERS = "cuda-include.tar.gz"
#: the GPU machine's Python, and the dependencies it already has (pyproject names)
GPU_PYTHON = "3.12"
GPU_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
GPU_MACHINE_HAS = ("numpy", "pandas", "matplotlib", "pyyaml", "tqdm")
#: dependencies the GPU tasks never import, not shipped there: pyarrow (a 40 MB wheel) is
#: imported only to read per-step Parquet records (pagesim.records.steps), which no GPU
#: task does
GPU_MACHINE_SKIPS = ("pyarrow",)
GPU_BUDGET_S = 240.0
#: seconds for benchmarks/gpu_iterations.py's whole steps after the kernels (0: none)
GPU_ITERATIONS_BUDGET_S = 180.0
#: runs pagesim's CLI from the sources: ``python -c SOURCE_RUN ROOT ARGS...``
SOURCE_RUN = (
    "import sys; root = sys.argv.pop(1); import pagesim; pagesim.__path__.append(root); "
    "from pagesim import _native; "
    "print(f'pagesim from {pagesim.__path__[0]} ({_native.status})', flush=True); "
    "from pagesim.cli import main; sys.exit(main(sys.argv[1:]))"
)


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


def gpu_requirements() -> list[str]:
    """pagesim's dependencies that the GPU machine lacks (pyproject's, minus GPU_MACHINE_HAS
    and GPU_MACHINE_SKIPS)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    name = lambda req: re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower()  # noqa: E731
    return [d for d in deps if name(d) not in (*GPU_MACHINE_HAS, *GPU_MACHINE_SKIPS)]


def gpu_wheels(argv: list[str]) -> int:
    """Download the wheels (and pack the CUDA headers) that gpu-calibrate installs there."""
    python = argv[argv.index("--python-version") + 1] if "--python-version" in argv else GPU_PYTHON
    GPU_WHEELS.mkdir(exist_ok=True)
    abi = "cp" + python.replace(".", "")
    platforms = [arg for p in GPU_PLATFORMS for arg in ("--platform", p)]
    sh(sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
       "--python-version", python, "--implementation", "cp", "--abi", abi, *platforms,
       "--dest", GPU_WHEELS, *gpu_requirements())  # fmt: skip
    include = _cuda_include()
    headers = GPU_WHEELS / CUDA_HEADERS
    if include is not None:
        with tarfile.open(headers, "w:gz", dereference=True) as tar:
            tar.add(include, arcname="include")
    else:
        print("no CUDA toolkit found here: the CUDA headers are not packed", flush=True)
    files = sorted(p for p in GPU_WHEELS.iterdir() if p.name != "manifest.json")
    manifest = {
        "python": python,
        "platforms": list(GPU_PLATFORMS),
        "requirements": gpu_requirements(),
        "files": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files},
        "cuda_include_from": str(include) if headers.exists() else None,
        "source": _git("describe", "--always", "--dirty"),
    }
    (GPU_WHEELS / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(p.stat().st_size for p in GPU_WHEELS.iterdir())
    print(f"{GPU_WHEELS.name}/: {len(files)} files, {size / 2**20:.1f} MiB (carry it to the GPU)")
    # the kernels compile under NVRTC as CuPy will there (no GPU needed): a failure here
    # would otherwise cost a device call
    if not (BIN / "python").exists():
        print("no .venv here: the NVRTC check of the kernels is skipped (python3 tasks.py test)")
        return 0
    return (
        1
        if subprocess.run([str(BIN / "python"), "-m", "pagesim.calibrate.nvrtc"]).returncode == 1
        else 0
    )


def _cuda_include() -> Path | None:
    """The local CUDA toolkit's include folder ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda)."""
    roots = [Path(os.environ[k]) for k in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(k)]
    for root in [*roots, Path("/usr/local/cuda")]:
        if (root / "include" / "cuda_fp16.h").is_file():
            return (root / "include").resolve()
    return None


def _git(*args: str) -> str | None:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


class Tee:
    """Lines to the console and to a log file."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _missing_modules(env: dict[str, str]) -> list[str]:
    """The GPU requirements this Python cannot import (with ``env``'s PYTHONPATH)."""
    modules = [
        re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].replace("-", "_") for r in gpu_requirements()
    ]
    probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    out = subprocess.run(
        [sys.executable, "-c", probe, *modules], env=env, capture_output=True, text=True
    )
    return out.stdout.split()


def install_wheels(
    wheels: Path, target: Path, log, requirements: list[str] | None = None, use_pip: bool = True
) -> None:
    """Install ``requirements`` (default: the GPU ones) from the wheels in ``wheels`` into
    ``target``, offline: pip ``--no-index``; where this Python has no pip, or pip refuses,
    unpack every wheel there (pure-Python and manylinux wheels import unpacked)."""
    target.mkdir(parents=True, exist_ok=True)
    requirements = gpu_requirements() if requirements is None else requirements
    if use_pip:
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
               str(wheels), "--target", str(target), "--upgrade", *requirements]  # fmt: skip
        log("+ " + " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        for line in (proc.stdout + proc.stderr).splitlines():
            log("  " + line)
        if proc.returncode == 0:
            return
        log(f"pip exit {proc.returncode}: unpacking the wheels instead")
    for wheel in sorted(wheels.glob("*.whl")):
        log(f"unpacking {wheel.name} into {target}")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(target)


def _whole_steps(out: Path, budget_s: float, env: dict[str, str], log) -> None:
    """benchmarks/gpu_iterations.py into ``out/iterations.csv`` (its lines into the log),
    where this Python has PyTorch and a GPU; else one line saying why not. Its failure is
    logged, never the call's: the kernel profile is already written."""
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    found = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True)
    if found.returncode != 0:
        why = "no CUDA GPU visible to PyTorch" if found.returncode == 3 else "no PyTorch here"
        log(f"whole steps: skipped ({why}); benchmarks/gpu_iterations.py needs both")
        return
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_iterations.py"), "--out",
           str(out / "iterations.csv"), "--budget-s", f"{budget_s:g}"]  # fmt: skip
    log("+ " + " ".join(cmd[1:]))
    log(f"whole steps: exit {_tee(cmd, env, log)}")


def _tee(cmd: list[str], env: dict[str, str], log) -> int:
    """Run ``cmd`` from the root, every line of its output (stderr too) into ``log``."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        log(line.rstrip("\n"))
    return proc.wait()


def gpu_calibrate(argv: list[str]) -> int:
    """Install what is missing, check, run ``pagesim calibrate`` within a budget (module doc)."""
    started = time.perf_counter()
    args = list(argv)

    def take(flag: str, default: str | None) -> str | None:
        if flag in args:
            i = args.index(flag)
            value = args[i + 1]
            del args[i : i + 2]
            return value
        return default

    out = Path(take("--out", os.environ.get("OUT") or str(ROOT / "out" / "gpu-calibrate")))
    budget = take("--budget-s", str(GPU_BUDGET_S))
    steps_budget = float(take("--iterations-budget-s", str(GPU_ITERATIONS_BUDGET_S)))
    dry_run = "--dry-run" in args
    out.mkdir(parents=True, exist_ok=True)
    log = Tee(out / "run.log")
    try:
        log(f"gpu-calibrate: Python {sys.version.split()[0]} at {sys.executable}; output {out}")
        if shutil.which("nvidia-smi"):
            query = "name,memory.total,clocks.max.sm,clocks.max.mem,driver_version,power.limit"
            smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"],
                                 capture_output=True, text=True)  # fmt: skip
            for line in (smi.stdout + smi.stderr).splitlines():
                log("  nvidia-smi: " + line)
        elif not dry_run:
            log("  no nvidia-smi on PATH")
        env = dict(os.environ)
        path = [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
        env["PYTHONPATH"] = os.pathsep.join(path)
        missing = _missing_modules(env)
        if missing:  # from the carried wheels, in a folder of this Python's own
            site = GPU_SITE.with_name(f"{GPU_SITE.name}-{sys.implementation.cache_tag}")
            env["PYTHONPATH"] = os.pathsep.join([str(site), *path])
            if _missing_modules(env):
                if not GPU_WHEELS.is_dir():
                    raise SystemExit(
                        f"this Python lacks {missing} and {GPU_WHEELS.name}/ is absent: run "
                        "`python3 tasks.py gpu-wheels` where there is an index, and carry it"
                    )
                install_wheels(GPU_WHEELS, site, log)
            still = _missing_modules(env)
            if still:
                raise SystemExit(f"after installing the carried wheels, still missing: {still}")
        log(f"dependencies: importable ({', '.join(gpu_requirements())})")
        headers = GPU_WHEELS / CUDA_HEADERS
        if headers.is_file() and not dry_run:
            with tarfile.open(headers) as tar:
                tar.extractall(GPU_CUDA_INCLUDE, filter="data")
            env["PAGESIM_NVRTC_INCLUDE"] = str(GPU_CUDA_INCLUDE / "include")
        env.update(PAGESIM_PURE_PYTHON="1", MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
        env.setdefault("MPLCONFIGDIR", str(ROOT / "build" / "mplconfig"))
        cmd = [sys.executable, "-c", SOURCE_RUN, str(ROOT), "calibrate", "--out", str(out),
               "--budget-s", budget, *args]  # fmt: skip
        log("+ pagesim " + " ".join(cmd[4:]))
        code = _tee(cmd, env, log)
        if code == 0 and steps_budget > 0:
            _whole_steps(out, steps_budget, env, log)
        files = sorted(p for p in out.iterdir() if p.is_file())
        log("output: " + ", ".join(f"{p.name} ({p.stat().st_size / 1024:.0f} KiB)" for p in files))
        log(f"gpu-calibrate: exit {code} after {time.perf_counter() - started:.0f} s")
        return code
    finally:
        log.close()


class Stage(NamedTuple):
    """One stage of ``tasks.py test``: a command, with ``env`` added to the environment.
    (A named tuple, not a dataclass: tests load this file by path, as no module.)"""

    name: str
    cmd: list[str | Path]
    env: dict[str, str] | None = None


#: pytest's exit status when the arguments selected no test (not a failure)
NO_TESTS = 5


def suite_stages(rest: list[str]) -> list[Stage]:
    """Lint; the suite on the compiled build; then with the engine's modules as Python
    (what an edited checkout runs) the tests that patch them (marked pure_python) and,
    without arguments, the golden files."""
    pytest = [BIN / "python", "-m", "pytest", "-q", "-n", "2"]
    pure = {"PAGESIM_PURE_PYTHON": "1"}
    stages = [
        Stage("lint", [BIN / "ruff", "check", "."]),
        Stage("compiled suite", [*pytest, *rest]),
        Stage("pure-Python pass", [*pytest, "-m", "pure_python", *rest], pure),
    ]
    if not rest:
        stages.append(Stage("golden files", [*pytest, "tests/simulator/test_goldens.py"], pure))
        # the docs site, strict (a broken link fails), the notebooks not run (tests/notebooks does)
        stages.append(docs_stage(False))
    return stages


def run_stages(stages: list[Stage]) -> int:
    """Run every stage, whatever the ones before it gave, and report each one's result
    and wall time; 1 if any failed, else 0."""
    results = []
    for stage in stages:
        env = stage.env or {}
        shown = " ".join(f"{k}={v}" for k, v in env.items())
        print(f"+ [{stage.name}] {shown + ' ' if shown else ''}"
              + " ".join(str(c) for c in stage.cmd), flush=True)  # fmt: skip
        started = time.monotonic()
        code = subprocess.run(
            [str(c) for c in stage.cmd], cwd=ROOT, env={**os.environ, **env}
        ).returncode
        results.append((stage.name, code, time.monotonic() - started))
    print("tasks.py test:", flush=True)
    for name, code, seconds in results:
        verdict = {0: "passed", NO_TESTS: "no test selected"}.get(code, f"FAILED (exit {code})")
        print(f"  {name:<17} {verdict:<20} {seconds / 60:5.1f} min", flush=True)
    total_s = sum(seconds for _, _, seconds in results)
    failed = [name for name, code, _ in results if code not in (0, NO_TESTS)]
    print(f"  {'total':<17} {'FAILED: ' + ', '.join(failed) if failed else 'passed':<20} "
          f"{total_s / 60:5.1f} min", flush=True)  # fmt: skip
    return 1 if failed else 0


def docs(execute: bool, *mkdocs_args: str) -> None:
    """Build the docs site (mkdocs.yml) into site/, strict: any warning, a broken link or
    anchor, a page left out of the nav, fails it. With ``execute`` (``tasks.py docs``) it
    first regenerates docs/cli.md and docs/experiments.md from the code, and the notebooks
    run and are rendered with their outputs; ``tasks.py test`` builds what is committed
    without running them (tests/notebooks runs them)."""
    if execute:
        sh(BIN / "python", "-m", "pagesim.docgen", "--write", "docs/cli.md")
        print("+ python -m pagesim.experiments.docs > docs/experiments.md", flush=True)
        text = subprocess.run([str(BIN / "python"), "-m", "pagesim.experiments.docs"],
                              cwd=ROOT, check=True, capture_output=True, text=True).stdout  # fmt: skip
        (ROOT / "docs" / "experiments.md").write_text(text, encoding="utf-8")
    stage = docs_stage(execute, *mkdocs_args)
    print(f"+ PAGESIM_DOCS_EXECUTE={stage.env['PAGESIM_DOCS_EXECUTE']}", *stage.cmd, flush=True)
    subprocess.run(
        [str(c) for c in stage.cmd], cwd=ROOT, env={**os.environ, **stage.env}, check=True
    )


def docs_stage(execute: bool, *mkdocs_args: str) -> Stage:
    """The strict mkdocs build of the docs site, the notebooks run or not."""
    env = {
        "PAGESIM_DOCS_EXECUTE": str(execute).lower(),  # mkdocs.yml's mkdocs-jupyter execute
        "NO_MKDOCS_2_WARNING": "1",  # mkdocs-material's notice about mkdocs 2 (extra pins <2)
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",  # the notebooks' charts
        "PATH": str(BIN) + os.pathsep + os.environ.get("PATH", ""),  # their kernel: this venv's
    }
    cmd = [BIN / "mkdocs", "build", "--strict", "--site-dir", ROOT / "site", *mkdocs_args]
    return Stage("docs site", cmd, env)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "gpu-wheels":
        return gpu_wheels(argv[1:])
    if argv and argv[0] == "gpu-calibrate":
        return gpu_calibrate(argv[1:])
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
            return run_stages(suite_stages(rest))
        elif task == "docs":
            docs(True, *rest)
        elif task == "bench":
            for script in sorted((ROOT / "benchmarks").glob("bench_*.py")):
                sh(BIN / "python", script, *rest)
    except subprocess.CalledProcessError as exc:
        return exc.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
