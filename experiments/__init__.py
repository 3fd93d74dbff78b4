"""pagesim.experiments layer."""
