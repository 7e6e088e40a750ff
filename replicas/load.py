"""The replica's load: requests in flight and waiting, and the report each answer carries.

Counted on the event loop as requests begin and end (both doors), so reading it costs
nothing; ``queue`` is what waits for an inference thread (in flight beyond the threads that
run the model). `report` is the ``endpoint-load-metrics`` value (`v2proto.load`), with the
accelerator's temperature and ECC counts when it has one, so a gateway learns of a GPU
heating up from the answers it already gets.
"""

from __future__ import annotations

from v2proto.dcgm import BY_NAME, Reading
from v2proto.load import ACCELERATOR_NAMES, INFLIGHT, QUEUE, text_report


class ReplicaLoad:
    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.inflight = 0  # received and not yet answered

    def began(self) -> None:
        self.inflight += 1

    def ended(self) -> None:
        self.inflight -= 1

    @property
    def queue(self) -> int:
        """Requests waiting for an inference thread."""
        return max(0, self.inflight - self.threads)

    def report(self, accelerator: Reading | None) -> str:
        """The load report for an answer sent now."""
        named: list[tuple[str, float]] = [(QUEUE, self.queue), (INFLIGHT, self.inflight)]
        if accelerator is not None:
            for name in ACCELERATOR_NAMES:
                value = accelerator.value(BY_NAME[name])
                if value is not None:
                    named.append((name, value))
        return text_report(named)
