"""Service level objectives: per-model SLOs, error budgets, burn-rate alerts, burn policy."""
