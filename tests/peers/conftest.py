"""Real MLServer and KServe servers, once per session; skipped when their venvs are not built.

The venvs come from `make peers` (`.ci/peers.sh`, about 2 min the first time, then cached),
which `make test` runs first; a bare `pytest` on a machine without them skips every peer test
with the reason and the command.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pytest

from replicas.dataset import load_split
from tests.support.peers import KSERVE, MLSERVER, Peer, PeerProcess, start_kserve, start_mlserver

ROWS = 40


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "peers: starts real MLServer/KServe servers from .peers/ (`make peers`)"
    )


class Rows(NamedTuple):
    x: npt.NDArray[np.float32]
    y: npt.NDArray[np.int64]


@pytest.fixture(scope="session")
def digits_rows() -> Rows:
    """The first ``ROWS`` rows of the project's test split and their labels."""
    _, x_test, _, y_test = load_split()
    return Rows(x_test[:ROWS], y_test[:ROWS])


def _require(peer: Peer) -> None:
    reason = peer.missing()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def mlserver() -> Iterator[PeerProcess]:
    _require(MLSERVER)
    proc = start_mlserver()
    yield proc
    proc.cleanup()


@pytest.fixture(scope="session")
def kserve() -> Iterator[PeerProcess]:
    _require(KSERVE)
    proc = start_kserve()
    yield proc
    proc.cleanup()


@pytest.fixture(params=["mlserver", "kserve"])
def peer(request: pytest.FixtureRequest) -> PeerProcess:
    """Each real peer in turn."""
    proc: PeerProcess = request.getfixturevalue(request.param)
    return proc
