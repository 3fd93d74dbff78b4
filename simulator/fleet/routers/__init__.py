"""Routers, by the name a RunSpec uses (``cluster.router``): one file and one line each.

Each rule, with its source, is in its module's docstring and in docs/fleets.md.
"""

from pagesim.simulator.fleet.routers.base import FleetState, Router
from pagesim.simulator.fleet.routers.least_kv import LeastKv
from pagesim.simulator.fleet.routers.least_outstanding import LeastOutstanding
from pagesim.simulator.fleet.routers.prefix_aware import PrefixAware
from pagesim.simulator.fleet.routers.random_choice import RandomChoice
from pagesim.simulator.fleet.routers.round_robin import RoundRobin
from pagesim.simulator.fleet.routers.sticky import Sticky

ROUTERS: dict[str, type[Router]] = {
    "round-robin": RoundRobin,
    "random": RandomChoice,
    "least-outstanding": LeastOutstanding,
    "least-kv": LeastKv,
    "prefix-aware": PrefixAware,
    "sticky": Sticky,
}

__all__ = ["ROUTERS", "FleetState", "Router"]
