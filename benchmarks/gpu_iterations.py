"""Whole engine steps of real model shapes on this GPU: ``pagesim calibrate steps``.

    python benchmarks/gpu_iterations.py [--out iterations.csv] [--models llama-2-7b@tp1 ...]
                                        [--budget-s 300] [--repeats 20] [--device cpu]
                                        [--compile [--full-grid]]

The same code as ``pagesim calibrate steps`` (``pagesim.calibrate.torch_steps``: what it
times and writes), runnable from the sources where pagesim is not installed (a GPU
machine with PyTorch and nothing else: ``tasks.py gpu-calibrate`` runs it so).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    import pagesim

    if str(ROOT) not in pagesim.__path__:
        pagesim.__path__.append(str(ROOT))
    from pagesim.calibrate import torch_steps
    from pagesim.calibrate.cli import steps_arguments
    from pagesim.errors import PagesimError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps_arguments(parser)
    try:
        return torch_steps.run(parser.parse_args(argv), name="gpu_iterations")
    except PagesimError as exc:
        sys.exit(str(exc))


if __name__ == "__main__":
    sys.exit(main())
