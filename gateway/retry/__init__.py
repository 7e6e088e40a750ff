"""Retries: the retry layer of the request path (`layer.py`: one loop of attempts on untried
replicas), the policy that allows each retry (`policy.py`), the slow attempts still racing
(`pending.py`), backoff with full jitter (`backoff.py`), the gateway-wide retry budget and its
counts shared between instances (`budget.py`, `budget_sharing.py`), and the per-try timeout
learned from a pool's latency (`try_timeout.py`).

The layer takes the values every layer passes from `gateway.call`, one layer below; the hedge
and the per-attempt timeout's race stay in `gateway.pipeline` (docs/architecture.md).
"""
