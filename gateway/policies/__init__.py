"""Decisions as small objects that more than one feature reads: the copy gate (rollout copies
and audits), replicas' load reports, and the range an accelerator reading may take.

Admission, voting, retry, fault judging, memory and accelerator health have folders of their
own (`gateway.admission`, `gateway.voting`, `gateway.retry`, `gateway.faults`, `gateway.memory`,
`gateway.accelerator`); a pool's latency window and replica selection are in `gateway.upstream`.
"""
