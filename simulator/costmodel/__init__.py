"""The cost model: how long one engine step takes, from a BatchPlan and a profile file.

``profile`` (the YAML schema) and ``features`` (the physical features of each kernel
family) are shared with ``calibrate``, which fits profiles; the rest evaluates them.
See docs/cost_model.md for every term's formula and the analytic constants.
"""

from pagesim.lazy import lazy_exports

#: public names -> the module that defines them (imported when first used)
_LAZY = {
    "analytic_profile": "pagesim.simulator.costmodel.analytic",
    "make_cost_model": "pagesim.simulator.costmodel.factory",
    "resolve_profile": "pagesim.simulator.costmodel.factory",
    "NEEDED_TERMS": "pagesim.simulator.costmodel.model",
    "CostModel": "pagesim.simulator.costmodel.model",
    "Profile": "pagesim.simulator.costmodel.profile",
    "Term": "pagesim.simulator.costmodel.profile",
    "load_profile": "pagesim.simulator.costmodel.profile",
    "profile_from_dict": "pagesim.simulator.costmodel.profile",
    "project_profile": "pagesim.simulator.costmodel.projection",
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "NEEDED_TERMS",
    "CostModel",
    "Profile",
    "Term",
    "analytic_profile",
    "load_profile",
    "make_cost_model",
    "profile_from_dict",
    "project_profile",
    "resolve_profile",
]
