"""pagesim.experiments layer."""

import sys as _sys

if getattr(_sys.modules.get("pagesim"), "__file__", None) is None:  # pagesim/api.py: clones
    raise ImportError("pagesim is a clone's folder here, not the package: start Python elsewhere")
