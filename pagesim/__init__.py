"""pagesim: a trace-driven discrete-event simulator of LLM serving.

The subpackages are layers, and imports point one way:
``workloads``, ``allocators`` -> ``simulator`` -> ``experiments``.
``calibrate`` writes profile files whose schema ``simulator.costmodel`` owns.

``pagesim.simulate`` and ``pagesim.sweep`` (``pagesim/api.py``) run a spec or a sweep
in memory and return DataFrames, for notebooks; they are imported when first used, as
``pagesim.__version__`` is read from the installed package's metadata when first asked
for (reading it costs more than importing the simulator's own modules).

The engine's per-step modules run compiled by mypyc when the install compiled them and
their sources are unchanged, else as Python (``pagesim._native``; ``status`` says which).
"""

from pathlib import Path as _Path

from pagesim import _native

__all__ = ["__version__", "simulate", "sweep"]

_native.choose(_Path(__file__).resolve().parent)


def __getattr__(name: str):
    if name in ("simulate", "sweep"):
        from pagesim import api

        return getattr(api, name)
    if name != "__version__":
        raise AttributeError(f"module 'pagesim' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("pagesim")
    except PackageNotFoundError:  # running from a source tree that is not installed
        value = "0.0.0+unknown"
    globals()["__version__"] = value
    return value
