"""pagesim: a trace-driven discrete-event simulator of LLM serving.

The subpackages are layers, and imports point one way:
``workloads``, ``allocators`` -> ``simulator`` -> ``experiments``.
``calibrate`` writes profile files whose schema ``simulator.costmodel`` owns.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pagesim")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
