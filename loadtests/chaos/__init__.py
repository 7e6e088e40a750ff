"""Chaos scenarios for the gateway: real processes, Locust load, faults on a timeline, reports.

A scenario starts its own local stack (replicas with fault injection, optional Redis, one
gateway), drives it with Locust (`loadtests/locustfile.py`) for a bounded time, injects faults
on a timeline and judges the run against an objective from per-second statistics it computes
from one JSON line per request. Run ``python -m loadtests.chaos --help``.

Modules, outer to inner::

    __main__    the command line: pick scenarios, run them, write the suite table
    runner      one scenario: cluster up, Locust on, timeline, stats, verdict, report
    scenarios   the catalogue: topology, gateway models, timeline and objective of each
    actions     faults: HTTP to /admin/faults, SIGKILL, SIGSTOP/SIGCONT, restarts, Redis
    cluster     the processes of one scenario, ports chosen up front, stopped by PID
    swarm       Locust as a bounded subprocess
    stats       per-second and per-phase statistics from the request events
    objectives  pass/fail of a run against a scenario's objective
    report      Markdown for a scenario and the suite table; plots: the PNG timeline
    events      the one-JSON-line-per-request format written by the locustfile
    reference   request bodies from the digits test split and their expected labels
    checks      what every response is checked for (status, schema, correctness)
    capacity    Locust's maximum sustainable throughput, gateway vs direct
"""
