"""Fleets: replicas of a server behind a router, and prefill/decode disaggregation, in
the one SimPy event loop (docs/fleets.md). ``simulate`` runs a spec with a ``cluster``
of more than one replica, or a ``disaggregation`` section, through
:func:`pagesim.simulator.fleet.run.simulate_fleet`."""
