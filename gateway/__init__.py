"""Fault-tolerant Open Inference Protocol (KServe V2 REST) gateway."""

__version__ = "0.1.0"
