"""pagesim.allocators layer."""
