"""pagesim.simulator.costmodel layer."""
