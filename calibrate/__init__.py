"""pagesim.calibrate layer."""
