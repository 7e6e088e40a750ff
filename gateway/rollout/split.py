"""Which requests a canary's candidate serves: exactly its share, spread evenly.

A random draw per request serves the share only on average: at a small share, the first
hundred requests may hold several candidate answers or none, so what a bad candidate costs
clients before its evidence says no swings with luck. `SmoothSplit` keeps a credit that every
request adds the share to and every candidate request spends one from (error diffusion): the
candidate serves one request in each run of ``100 / share``, the first at a random offset (so
gateways of a fleet do not pick the same ones). A change of share keeps the credit, so the
next step starts where the last one left off.
"""

from __future__ import annotations

import random


class SmoothSplit:
    def __init__(self, rng: random.Random) -> None:
        self._credit = rng.random()

    def take(self, percent: float) -> bool:
        """Whether this request is the candidate's, at a share of ``percent`` (0..100)."""
        if percent >= 100:
            return True
        if percent <= 0:
            return False
        self._credit += percent / 100
        if self._credit < 1:
            return False
        self._credit -= 1
        return True
