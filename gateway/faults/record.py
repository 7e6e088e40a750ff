"""A pool's recent record for the fault judge: its error streak and the inputs it refused.

The judge (`gateway.faults.judge`) is pure; what it needs to know about the pool beyond one
request lives here, written by the attempt layer as answers arrive and read as a `PoolFaultView`
when a verdict is due. Concurrent requests share it: that is the point (a pool that fails
everyone's requests is broken; an input that one replica refused on several requests is
poison), so every update is a plain step with no await in between.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable

from gateway.clock import Clock
from gateway.faults.judge import PoolFaultView

# refused inputs remembered per pool (least recently refused forgotten first)
MAX_INPUTS = 1024
# refusal times kept per input and status
KEPT_TIMES = 8


class FaultRecord:
    """Bounded by count: at most ``max_inputs`` refused (input, status) pairs, the least
    recently refused forgotten first, each with its last `KEPT_TIMES` refusal times."""

    def __init__(self, clock: Clock, max_inputs: int = MAX_INPUTS) -> None:
        self._clock = clock
        self._max_inputs = max_inputs
        self._refused: OrderedDict[tuple[str, int], deque[float]] = OrderedDict()
        # error answers (4xx/5xx) in a row across the pool
        self.error_streak = 0

    def answered(self) -> None:
        """A replica of the pool answered a request well."""
        self.error_streak = 0

    def failed(self) -> None:
        """A replica of the pool answered an error status."""
        self.error_streak += 1

    def refused(self, input_: str, status: int) -> None:
        """A replica answered a disputed ``status`` to ``input_`` (an error answer too; an
        unnamed input, "", is not remembered)."""
        self.failed()
        if not input_:
            return
        key = (input_, status)
        times = self._refused.get(key)
        if times is None:
            times = self._refused[key] = deque(maxlen=KEPT_TIMES)
            if len(self._refused) > self._max_inputs:
                self._refused.popitem(last=False)
        else:
            self._refused.move_to_end(key)
        times.append(self._clock.now())

    def view(self, size: int, inputs: Iterable[tuple[str, int]] = ()) -> PoolFaultView:
        """The record as the judge reads it, with the refusal times of ``inputs`` only."""
        refused_at = {key: tuple(self._refused.get(key, ())) for key in inputs}
        return PoolFaultView(size, self.error_streak, self._clock.now(), refused_at)
