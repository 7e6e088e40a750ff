"""Load shapes as plain functions of time: steady, step and spike user counts.

The locustfile's one `LoadTestShape` asks `plan()` what to run at each tick, so the shapes are
testable without Locust and the capacity measurement reuses the step shape's arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence

SHAPES = ("steady", "step", "spike")
DEFAULT_USERS = 16
DEFAULT_RUN_S = 60.0
STEPS = 4  # step shape without explicit steps: -u in this many equal steps over -t
SPIKE = (0.4, 0.6)  # spike shape: the share of the run at full -u; -u/4 outside it

Tick = tuple[int, float] | None  # (users, spawn rate per second), None = stop


def step_users(users: int, explicit: Sequence[int] = ()) -> list[int]:
    if explicit:
        return [max(1, int(u)) for u in explicit]
    return sorted({max(1, round(users * k / STEPS)) for k in range(1, STEPS + 1)})


def plan(
    shape: str,
    elapsed_s: float,
    *,
    users: int | None,
    spawn_rate: float | None,
    run_time_s: float | None,
    steps: Sequence[int] = (),
    step_s: float | None = None,
) -> Tick:
    """Users and spawn rate at ``elapsed_s`` into the run, or None when the run is over."""
    users = users or DEFAULT_USERS
    rate = spawn_rate or float(users)
    if shape == "steady":
        if run_time_s is not None and elapsed_s >= run_time_s:
            return None
        return users, rate
    if shape == "step":
        levels = step_users(users, steps)
        each = step_s or (run_time_s or DEFAULT_RUN_S) / len(levels)
        index = int(elapsed_s // each)
        if index >= len(levels):
            return None
        return levels[index], float(max(levels)) * 10  # each step starts at once
    if shape == "spike":
        total = run_time_s or DEFAULT_RUN_S
        if elapsed_s >= total:
            return None
        base = max(1, users // 4)
        spiking = SPIKE[0] * total <= elapsed_s < SPIKE[1] * total
        return (users if spiking else base), float(users) * 10
    raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")


def step_windows(
    users: int, steps: Sequence[int], step_s: float | None, run_time_s: float | None
) -> list[tuple[int, float, float]]:
    """(users, start s, end s) of each step of the step shape, as `plan` runs it."""
    levels = step_users(users, steps)
    each = step_s or (run_time_s or DEFAULT_RUN_S) / len(levels)
    return [(u, i * each, (i + 1) * each) for i, u in enumerate(levels)]
