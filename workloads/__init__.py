"""pagesim.workloads layer."""
