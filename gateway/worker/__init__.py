"""The data-plane worker process: the request path on its own event loop, one per core."""
