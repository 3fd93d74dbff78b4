"""The ``pagesim`` command line.

Each layer contributes its subcommands through a ``register(subparsers)`` function
in its own ``cli`` module, listed in :data:`COMMAND_MODULES` (adding a command
group means one module and one line here). Command modules import only argparse at
module level and do their heavy imports inside the handler, so ``pagesim --help``
stays fast.

Every handler returns an exit code. A :class:`~pagesim.errors.PagesimError` is
printed as one line (``pagesim: error: ...``) with exit code 2, never a traceback, and
so is a write that fails for want of space or permission (a full disk, a quota, a
read-only file system): every file pagesim writes is replaced whole or left as it was;
Ctrl-C exits 130, and output piped into a reader that stops (``| head``) ends
quietly with 141, as a shell pipeline would.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys

from pagesim import __version__
from pagesim.errors import PagesimError

#: write errors that are the machine's state, not pagesim's fault: one line, no traceback
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)

COMMAND_MODULES = (
    "pagesim.experiments.cli",
    "pagesim.simulator.cli",
    "pagesim.workloads.cli",
    "pagesim.calibrate.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pagesim",
        description=(
            "Trace-driven simulator of LLM serving and KV-cache memory management "
            "(PagedAttention, Orca, static batching), with a real-kernel calibration mode."
        ),
        epilog=(
            "examples:\n"
            "  pagesim run experiments/memory_waste.yaml --out out/memory_waste\n"
            "  pagesim simulate --allocator paged --rate 2 --num-requests 1000\n"
            "  pagesim workload stats sharegpt\n"
            "  pagesim list\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pagesim {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    completion = subparsers.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh, tcsh)",
        description=(
            "Print pagesim's completion script for SHELL, generated from this parser by shtab "
            "(pip install shtab, or the dev extra). Install it, e.g. for bash: "
            "pagesim completion bash > ~/.local/share/bash-completion/completions/pagesim"
        ),
    )
    completion.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    completion.set_defaults(func=lambda args: _print_completion(parser, args.shell))
    return parser


def _print_completion(parser: argparse.ArgumentParser, shell: str) -> int:
    try:
        import shtab
    except ImportError:
        raise PagesimError(
            "completion: the shtab package is not installed: pip install shtab"
        ) from None
    print(shtab.complete(parser, shell=shell))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except PagesimError as exc:
        print(f"pagesim: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a further Ctrl-C must not interrupt exit
        print("pagesim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into `head` that stopped reading: not an error of ours. Point
        # stdout at devnull so the interpreter's final flush does not fail again.
        # (when stdout is not a file descriptor, e.g. captured, nothing will flush it)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        kept = (
            "; nothing was half-written (each file pagesim writes is replaced whole or left "
            "as it was)"
            if exc.errno != errno.EACCES
            else ""
        )
        print(f"pagesim: error: {where}{exc.strerror}{kept}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
