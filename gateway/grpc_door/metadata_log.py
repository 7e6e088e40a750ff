"""grpc's error line for a client's metadata value that is not UTF-8, made a warning a while.

grpc decodes each metadata value a client sends as UTF-8; where that fails it logs an error
with a traceback (``Invalid encoding on ...``, more than once per value) and hands the value
on as Latin-1 text, which the door then judges as any other value: a request id or a
``tracestate`` outside printable ASCII is not taken (`gateway.v2.identity`,
`gateway.telemetry.tracecontext`). Left alone, those lines are a log any client can fill at
will, a few per call. `NonUtf8Metadata` lets one warning through per interval instead, with
neither the traceback nor the value, saying how many it held back.
"""

from __future__ import annotations

import logging

from gateway.clock import Clock
from gateway.telemetry.throttle import LogThrottle

CYGRPC_LOGGER = "grpc._cython.cygrpc"
# how grpc's line begins
_INVALID = "Invalid encoding on"
_SAID = "a gRPC client sent metadata that is not UTF-8 (read as Latin-1); %d such lines held back"


class NonUtf8Metadata(logging.Filter):
    """On grpc's logger: its non-UTF-8 metadata lines, one warning per ``interval_s``."""

    def __init__(self, clock: Clock, interval_s: float = 10.0) -> None:
        super().__init__()
        self._throttle = LogThrottle(clock, interval_s)

    def filter(self, record: logging.LogRecord) -> bool:
        if not (isinstance(record.msg, str) and record.msg.startswith(_INVALID)):
            return True
        held = self._throttle.allow(_INVALID)
        if held is None:
            return False
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg, record.args = _SAID, (held,)
        record.exc_info = record.exc_text = None
        return True


def quiet_non_utf8_metadata(clock: Clock) -> NonUtf8Metadata:
    """Puts the filter on grpc's logger, once per process (the same one on a second call)."""
    logger = logging.getLogger(CYGRPC_LOGGER)
    for present in logger.filters:
        if isinstance(present, NonUtf8Metadata):
            return present
    installed = NonUtf8Metadata(clock)
    logger.addFilter(installed)
    return installed
