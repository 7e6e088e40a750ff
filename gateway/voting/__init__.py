"""N-version voting: the vote route, one layer of the request path (`route.py`: k legs on
distinct pools), the vote rule over the legs' outputs (`rule.py`), its tensor plumbing
(`tensors.py`), the suspects a vote's dissents point at (`suspects.py`) and a suspect's
quarantine through the registry (`quarantine.py`).

The route takes the values every layer passes from `gateway.call`, one layer below; a
rollout, which compares answers with the vote rule, sits above (docs/architecture.md).
"""
