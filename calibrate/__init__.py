"""pagesim.calibrate: time real KV-cache kernels on a GPU and fit the cost model's profile.

Pipeline (``pipeline.calibrate``): plan a grid of shapes (``grid``) -> time each on a
backend (``cupy_backend`` on a GPU, ``synthetic`` in tests) with the ``timing`` harness ->
save the measurements CSV -> fit each term (``fit``) with 20% held out -> write
``profile.yaml`` (schema: ``pagesim.simulator.costmodel.profile``) and ``report.md``.
CuPy is imported lazily, inside functions, so everything else imports without it.
"""

import sys as _sys

if getattr(_sys.modules.get("pagesim"), "__file__", None) is None:  # pagesim/api.py: clones
    raise ImportError("pagesim is a clone's folder here, not the package: start Python elsewhere")
