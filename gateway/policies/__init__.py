"""Decisions as small objects built from typed config: replica selection and latency windows,
tenants' fair shares and limits, the rollout copy gate, replicas' load reports, and the range
an accelerator reading may take.

Voting, retry, fault judging, memory and accelerator health have folders of their own
(`gateway.voting`, `gateway.retry`, `gateway.faults`, `gateway.memory`, `gateway.accelerator`).
"""
