"""How many data-plane workers ``server.workers`` (or ``--workers``) asks for, as a number.

``auto`` is the CPUs this process may use: its CPU affinity (`os.sched_getaffinity`), capped by
the CPU quota of its cgroup and of every cgroup above it (v2 ``cpu.max``, v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), a fraction rounded up, and at least 1. A container
limited to 1.5 CPUs on a 16-core node gets 2 workers, not 16 that the quota would throttle.

The quota is read through an injected ``read`` (a path's text, or None where it cannot be read),
so the rules are pure functions that tests feed with fixtures.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath

from gateway.config.workers import AUTO, Workers, check_workers

CGROUP_ROOT = PurePosixPath("/sys/fs/cgroup")
# Where cgroup v1 mounts the cpu controller (alone, or joined with cpuacct).
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")
Read = Callable[[str], str | None]


def read_text(path: str) -> str | None:
    """The file's text, or None where it is missing or unreadable (no cgroup, no permission)."""
    try:
        with open(path) as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def parse_workers(text: str) -> Workers:
    """``--workers``'s value: ``auto`` or a count, by `check_workers`'s rule (`ValueError`)."""
    text = text.strip().lower()
    return check_workers(int(text) if text.isdigit() else text)


def chosen_workers(flag: Workers | None, configured: Workers) -> int:
    """The number of workers to run: ``--workers`` if given, else ``server.workers``."""
    return worker_count(configured if flag is None else flag)


def worker_count(
    workers: Workers,
    read: Read = read_text,
    affinity: Callable[[], int] = lambda: len(os.sched_getaffinity(0)),
) -> int:
    """``workers`` as a number: a count as it is, ``auto`` as `usable_cpus`."""
    return usable_cpus(read, affinity()) if workers == AUTO else int(workers)


def usable_cpus(read: Read, affinity: int) -> int:
    """The CPUs this process may use: ``affinity`` capped by its cgroups' quotas, at least 1."""
    cpus = affinity
    quota = cgroup_quota(read, read("/proc/self/cgroup") or "")
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, cpus)


def cgroup_quota(read: Read, membership: str) -> int | None:
    """The tightest CPU quota over this process's cgroups (v2 and v1), in whole CPUs rounded
    up; None where no quota applies. ``membership``: the text of ``/proc/self/cgroup``."""
    quotas = [q for q in _quotas(read, membership) if q is not None]
    return min(quotas) if quotas else None


def _quotas(read: Read, membership: str) -> Iterator[int | None]:
    for hierarchy, controllers, path in _memberships(membership):
        if hierarchy == "0" and controllers == "":
            for directory in _upwards(CGROUP_ROOT, path):
                yield v2_quota(read(str(directory / "cpu.max")))
        elif "cpu" in controllers.split(","):
            for mount in V1_CPU_MOUNTS:
                for directory in _upwards(CGROUP_ROOT / mount, path):
                    yield v1_quota(
                        read(str(directory / "cpu.cfs_quota_us")),
                        read(str(directory / "cpu.cfs_period_us")),
                    )


def _memberships(membership: str) -> list[tuple[str, str, str]]:
    """``/proc/self/cgroup``'s lines, ``hierarchy:controllers:path``; with none (no cgroups
    listed, or the file unreadable), the root of the v2 hierarchy, as a container sees it."""
    found = []
    for line in membership.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3:
            found.append((fields[0], fields[1], fields[2]))
    return found or [("0", "", "/")]


def _upwards(mount: PurePosixPath, path: str) -> Iterator[PurePosixPath]:
    """The cgroup's directory under ``mount`` and each one above it, up to ``mount``: a limit
    set on a parent applies to its children. In a container the mount is its own cgroup,
    where ``path`` names directories that do not exist there; they read as None."""
    directory = mount.joinpath(*PurePosixPath(path).parts[1:])
    while True:
        yield directory
        if directory == mount:
            return
        directory = directory.parent


def v2_quota(cpu_max: str | None) -> int | None:
    """cgroup v2's ``cpu.max`` (``"$QUOTA $PERIOD"``, or ``"max $PERIOD"``: no limit) in whole
    CPUs, rounded up; None where it sets no limit or cannot be read."""
    if cpu_max is None:
        return None
    fields = cpu_max.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _cpus(fields[0], fields[1])


def v1_quota(quota_us: str | None, period_us: str | None) -> int | None:
    """cgroup v1's ``cpu.cfs_quota_us`` (-1: no limit) over ``cpu.cfs_period_us`` in whole
    CPUs, rounded up; None where they set no limit or cannot be read."""
    if quota_us is None or period_us is None:
        return None
    return _cpus(quota_us.strip(), period_us.strip())


def _cpus(quota: str, period: str) -> int | None:
    try:
        quota_n, period_n = int(quota), int(period)
    except ValueError:
        return None
    if quota_n <= 0 or period_n <= 0:
        return None
    return max(1, math.ceil(quota_n / period_n))
