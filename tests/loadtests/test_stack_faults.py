"""Load tests' replicas get the stack's fault key, and the chaos actions send it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from loadtests.chaos.actions import clear_faults, set_faults
from loadtests.chaos.cluster import Cluster, Topology
from loadtests.stack import inject_faults

pytestmark = pytest.mark.integration
MODEL = "digits-mlp"


def test_chaos_actions_inject_and_clear_faults_with_the_stacks_key(models_dir: Path) -> None:
    cluster = Cluster(Topology(((MODEL, 1),)), models={})
    try:
        replica = cluster.stack.replica("mlp-0", MODEL, port=cluster.ports[MODEL][0])
        cluster.replicas[MODEL] = [replica]
        assert replica.fault_key == cluster.stack.fault_key
        url = f"{replica.url}/admin/faults"
        assert httpx.post(url, json={"hang": True}, trust_env=False).status_code == 401

        set_faults(MODEL, [0], latency_ms=7, ready=False)(cluster)
        assert httpx.get(f"{replica.url}/v2/health/ready", trust_env=False).status_code == 503
        clear_faults(MODEL, [0])(cluster)
        assert httpx.get(f"{replica.url}/v2/health/ready", trust_env=False).status_code == 200
    finally:
        cluster.close()


def test_a_replica_without_faults_has_no_key(models_dir: Path) -> None:
    cluster = Cluster(Topology(((MODEL, 1),)), models={})
    try:
        replica = cluster.stack.replica("plain", MODEL, faults=False)
        assert replica.fault_key is None
        with pytest.raises(ValueError, match="not started with faults"):
            inject_faults(replica, hang=True)
        assert httpx.delete(f"{replica.url}/admin/faults", trust_env=False).status_code == 404
    finally:
        cluster.close()
