"""Telemetry: Prometheus metrics, OpenTelemetry traces and structured JSON logs.

Every piece is built for the hot path first: recording costs well under a microsecond per
request for metrics and a few for traces (see ``loadtests/bench_telemetry.py``).
"""
