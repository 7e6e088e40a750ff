"""Decisions as small objects built from typed config: replica selection and latency windows,
tenants' fair shares and limits, the rollout copy gate, and the accelerator rules.

Voting, retry, fault judging and memory have folders of their own (`gateway.voting`,
`gateway.retry`, `gateway.faults`, `gateway.memory`).
"""
