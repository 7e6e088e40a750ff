"""Decisions as small objects built from typed config: classify, select, retry, vote."""
