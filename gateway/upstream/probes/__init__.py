"""What the gateway asks replicas off the request path: health, golden answers, metadata.

Each probe runs as a background loop over the registry's pools or once at check-config time.
"""
