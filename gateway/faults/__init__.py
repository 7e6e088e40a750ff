"""Fault judging: every attempt classified once into an `Outcome` (`classify.py`), the fault
judge that says who is at fault for an error answer, the request or the replicas (`judge.py`),
and a pool's recent record it reads (`record.py`).

Its verdicts are carried out on replicas by `gateway.upstream.fault_actions` (docs/architecture.md
says why that stays in `upstream/`).
"""
