"""The gateway-wide retry budget: retries may be at most ``ratio`` of recent requests plus a
floor of ``min_per_s`` (Finagle's RetryBudget; the defaults are Linkerd's).

A budget, unlike a per-request attempt cap, bounds the load a sick pool sees: when every
replica fails, total attempts stay near ``(1 + ratio) × requests + floor`` instead of
``max_attempts × requests``. Counts live in one-second buckets over a sliding window.
"""

from __future__ import annotations

import math
from typing import Any

from gateway.clock import Clock
from gateway.config.policies import RetryBudgetConfig
from gateway.policies.budget_sharing import SharedBudgetCounts


class RetryBudget:
    def __init__(self, config: RetryBudgetConfig, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._size = max(1, math.ceil(config.window_s))
        self._seconds = [-1] * self._size
        self._requests = [0] * self._size
        self._retries = [0] * self._size
        self.ratio = config.ratio
        self.spent_total = 0
        self.refused_total = 0
        self.requests_total = 0  # counted since start (a worker's, for its control process)
        self.shared: SharedBudgetCounts | None = None  # set when instances share state

    def carry_from(self, old: RetryBudget) -> bool:
        """A reload: the window's counts and totals go on when the budget's config stays
        (else the new budget starts afresh, as configured). True if carried."""
        if old._config != self._config:
            return False
        self._seconds, self._requests, self._retries = (
            list(old._seconds), list(old._requests), list(old._retries)
        )  # fmt: skip
        self.spent_total, self.refused_total = old.spent_total, old.refused_total
        return True

    def share(self) -> SharedBudgetCounts:
        """Starts counting for other instances too; returns the shared counts."""
        self.shared = SharedBudgetCounts(self._clock, self._size)
        return self.shared

    def _slot(self) -> int:
        second = int(self._clock.now())
        slot = second % self._size
        if self._seconds[slot] != second:
            self._seconds[slot] = second
            self._requests[slot] = 0
            self._retries[slot] = 0
        return slot

    def _window(self) -> tuple[int, int]:
        oldest = int(self._clock.now()) - self._size + 1
        requests = retries = 0
        for slot, second in enumerate(self._seconds):
            if second >= oldest:
                requests += self._requests[slot]
                retries += self._retries[slot]
        if self.shared is not None:
            remote_requests, remote_retries = self.shared.remote_window()
            requests += remote_requests
            retries += remote_retries
        return requests, retries

    def record_request(self) -> None:
        self._requests[self._slot()] += 1
        self.requests_total += 1
        if self.shared is not None:
            self.shared.count("req")

    def absorb(self, requests: int, retries: int, refused: int) -> None:
        """Requests, retries and refusals counted elsewhere (a control process's workers,
        whose budgets spend on their own): this budget's window, totals and what it shares
        with other gateways count them as its own."""
        slot = self._slot()
        self._requests[slot] += requests
        self._retries[slot] += retries
        self.requests_total += requests
        self.spent_total += retries
        self.refused_total += refused
        if self.shared is not None:
            for _ in range(requests):
                self.shared.count("req")
            for _ in range(retries):
                self.shared.count("retry")

    def balance(self, scale: float = 1.0) -> float:
        """Retries still allowed in the current window (may be fractional; never below 0).

        ``scale`` shrinks the allowance (0.5 halves it), as the burn policy asks while a
        model burns its error budget fast. Each count is kept at its own second, so the
        requests that paid for a retry may leave the window before the retry does: the
        window then holds more retries than it allows, which means none is allowed (0), not
        a negative number of them (found by a property test).
        """
        requests, retries = self._window()
        allowance = self.ratio * requests + self._config.min_per_s * self._size
        return max(0.0, scale * allowance - retries)

    def affordable(self, scale: float = 1.0) -> bool:
        """Whether one retry could be spent now; a "no" counts as a refusal."""
        if self.balance(scale) < 1.0:
            self.refused_total += 1
            return False
        return True

    def try_spend(self, scale: float = 1.0) -> bool:
        """Takes one retry (or hedge) from the budget if it has one."""
        if not self.affordable(scale):
            return False
        self._retries[self._slot()] += 1
        self.spent_total += 1
        if self.shared is not None:
            self.shared.count("retry")
        return True

    def snapshot(self) -> dict[str, Any]:
        requests, retries = self._window()
        return {
            "ratio": self.ratio,
            "min_per_s": self._config.min_per_s,
            "window_s": self._size,
            "requests_in_window": requests,
            "retries_in_window": retries,
            "balance": round(self.balance(), 2),
            "spent_total": self.spent_total,
            "refused_total": self.refused_total,
        }
