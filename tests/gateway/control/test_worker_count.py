"""``server.workers`` as a number: a count as it is, ``auto`` the CPUs this process may use,
its affinity capped by its cgroups' quotas (v2 and v1), read from fixtures here."""

from __future__ import annotations

import os

import pytest

from gateway.control.worker_count import (
    cgroup_quota,
    chosen_workers,
    parse_workers,
    usable_cpus,
    v1_quota,
    v2_quota,
    worker_count,
)

NOTHING: dict[str, str] = {}
V2_CONTAINER = {"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "150000 100000\n"}
V2_UNLIMITED = {"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "max 100000\n"}
V1_CONTAINER = {
    "/proc/self/cgroup": "4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n",
    "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000\n",
    "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
}
V1_UNLIMITED = {
    "/proc/self/cgroup": "1:cpu:/\n",
    "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
    "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
}
# a systemd slice with CPUQuota=300% above the service's own cgroup, which sets none
V2_NESTED = {
    "/proc/self/cgroup": "0::/system.slice/gateway.service\n",
    "/sys/fs/cgroup/system.slice/gateway.service/cpu.max": "max 100000\n",
    "/sys/fs/cgroup/system.slice/cpu.max": "300000 100000\n",
}


@pytest.mark.parametrize(
    ("tree", "affinity", "expected"),
    [
        (V2_CONTAINER, 16, 2),  # 1.5 CPUs, rounded up
        (V2_CONTAINER, 1, 1),  # pinned to one CPU: the affinity is tighter
        (V2_UNLIMITED, 16, 16),
        (V1_CONTAINER, 16, 2),
        (V1_UNLIMITED, 8, 8),
        (V2_NESTED, 16, 3),  # a parent's limit applies to its children
        ({}, 4, 4),  # no cgroup files at all
    ],
    ids=["v2", "v2-affinity", "v2-max", "v1", "v1-unlimited", "v2-parent", "none"],
)
def test_auto_is_the_affinity_capped_by_the_quota(
    tree: dict[str, str], affinity: int, expected: int
) -> None:
    assert worker_count("auto", tree.get, lambda: affinity) == expected


def test_a_count_is_taken_as_it_is() -> None:
    assert worker_count(3, NOTHING.get, lambda: 1) == 3


def test_the_tightest_of_v1_and_v2_wins() -> None:
    tree = {
        "/proc/self/cgroup": "1:cpu:/\n0::/\n",
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000",
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000",
        "/sys/fs/cgroup/cpu.max": "400000 100000",
    }
    assert cgroup_quota(tree.get, tree["/proc/self/cgroup"]) == 1


@pytest.mark.parametrize(
    ("cpu_max", "cpus"),
    [
        ("max 100000", None),
        ("100000 100000", 1),
        ("100001 100000", 2),
        ("50000 100000", 1),  # half a CPU still gets one worker
        ("800000 100000\n", 8),
        ("garbage", None),
        ("0 100000", None),
        (None, None),
    ],
)
def test_cgroup_v2_cpu_max(cpu_max: str | None, cpus: int | None) -> None:
    assert v2_quota(cpu_max) == cpus


@pytest.mark.parametrize(
    ("quota", "period", "cpus"),
    [("-1", "100000", None), ("250000", "100000", 3), (None, "100000", None), ("x", "1", None)],
)
def test_cgroup_v1_cfs_quota(quota: str | None, period: str | None, cpus: int | None) -> None:
    assert v1_quota(quota, period) == cpus


def test_never_below_one() -> None:
    assert usable_cpus(NOTHING.get, 0) == 1


def test_on_this_machine_auto_is_at_most_the_affinity() -> None:
    assert 1 <= worker_count("auto") <= len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("text", "value"), [("auto", "auto"), ("AUTO", "auto"), ("4", 4)])
def test_the_flag_takes_a_count_or_auto(text: str, value: int | str) -> None:
    assert parse_workers(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "two", "", "99999"])
def test_the_flag_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="a count from 1 to 1024, or 'auto'"):
        parse_workers(text)


def test_the_flag_overrides_the_config() -> None:
    assert chosen_workers(None, 3) == 3
    assert chosen_workers(2, 3) == 2
