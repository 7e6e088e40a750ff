"""N-version voting's decisions and state: the vote rule over k legs' outputs (`rule.py`), its
tensor plumbing (`tensors.py`) and the suspects a vote's dissents point at (`suspects.py`).

The vote route (`gateway.pipeline.vote`) and the quarantine of a suspect
(`gateway.upstream.suspects`) stay beside the layers and replicas they act on
(docs/architecture.md says why).
"""
