"""The cost model: how long one engine step takes, from a BatchPlan and a profile file.

``profile`` (the YAML schema) and ``features`` (the physical features of each kernel
family) are shared with ``calibrate``, which fits profiles; the rest evaluates them.
See docs/cost_model.md for every term's formula and the analytic constants.
"""

from pagesim.simulator.costmodel.analytic import analytic_profile
from pagesim.simulator.costmodel.factory import make_cost_model, resolve_profile
from pagesim.simulator.costmodel.model import NEEDED_TERMS, CostModel
from pagesim.simulator.costmodel.profile import Profile, Term, load_profile, profile_from_dict
from pagesim.simulator.costmodel.projection import project_profile

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
