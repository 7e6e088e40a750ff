"""The gateway's memory: the bound on in-flight request and answer bytes (`inflight_bytes.py`),
each client address's share of it (`peer_share.py`), and the heap handed back to the OS after
a burst of large bodies (`heap_trim.py`, an OS action rather than a decision).
"""
