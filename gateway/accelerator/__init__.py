"""Accelerator health: each replica's GPU read off the request path and matched against the
accelerator rules, which drain a replica before its GPU fails or lower its weight while it is
throttled.

The rules as data (`rules.py`), how near a limit the readings are (`need.py`), one replica's
window and hysteresis (`tracker.py`), the sampler's loops (`sampler.py`), the drains and
weights it asks for (`drains.py`) and its Prometheus series (`metrics.py`). A page read into
readings (`gateway.upstream.probes.accelerator_pages`, `accelerator_readings`) and the range
a reading may take (`gateway.policies.accelerator_values`) stay below `upstream/`, where the
load scraper and the load reports use them too (docs/architecture.md says why).
"""
