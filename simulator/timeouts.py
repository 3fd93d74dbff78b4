"""The SimPy timeouts the engine yields (``simulator/engine.py``).

A module of its own, and not compiled with the engine (``pagesim._native``):
``UrgentTimeout`` subclasses SimPy's ``Event``, a class from outside pagesim, which
only the interpreter builds faithfully.
"""

from __future__ import annotations

import math

import simpy
from simpy.events import URGENT, Event


class UrgentTimeout(Event):
    """A timeout processed before NORMAL events of the same time (arrivals before steps)."""

    def __init__(self, env: simpy.Environment, delay: float):
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, URGENT, delay)


def timeout_at(env: simpy.Environment, t_s: float) -> Event:
    """A timeout that fires at ``t_s`` exactly (``now + (t_s - now)`` can miss it by an ulp)."""
    now = env.now
    delay = t_s - now
    if now + delay == t_s and delay >= 0:  # the usual case; else one ulp either way
        return env.timeout(delay)
    for candidate in (math.nextafter(delay, math.inf), math.nextafter(delay, -math.inf)):
        if now + candidate == t_s and candidate >= 0:
            return env.timeout(candidate)
    return env.timeout(max(delay, 0.0))
