"""Retries' decisions and state: backoff with full jitter (`backoff.py`), the gateway-wide retry
budget and its counts shared between instances (`budget.py`, `budget_sharing.py`), and the
per-try timeout learned from a pool's latency (`try_timeout.py`).

The retry layer and its policy (`gateway.pipeline.retry`, `gateway.pipeline.retry_policy`)
stay in the pipeline beside the values every layer passes (docs/architecture.md says why).
"""
