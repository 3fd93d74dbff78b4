"""pagesim.simulator layer."""
