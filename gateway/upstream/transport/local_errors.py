"""The gateway's own resource errors, told apart from a replica's failures where they enter.

A connect or a read that fails because *this* process is short of something (file descriptors:
EMFILE, ENFILE; socket buffers: ENOBUFS; memory: ENOMEM) says nothing about the replica it was
meant for. Charged to that replica, it would trip its breaker, eject it and mark it unhealthy,
while every replica would fail the same way: the gateway's shortage would empty its own pools.
So the transports raise `LocalResourceError` for these (an outcome of its own,
``local_resource``, that no breaker, outlier detector or prober counts against a replica; see
`gateway.faults.judge`), and every one is counted here, by errno, for
``gateway_local_resource_errors_total``.

gRPC's core reports such an error only in its status details (in the socket layer's words,
``socket: Too many open files``), so a failed call's details are read for the same words.
"""

from __future__ import annotations

import errno
import os
from collections import Counter

from gateway.errors import LocalResourceError

LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# the socket layer's words for each, longest first ("... in system" before its prefix)
_WORDS = sorted(((os.strerror(n), n) for n in LOCAL_ERRNOS), key=lambda w: -len(w[0]))

# Errors seen in this process, by errno name (EMFILE ...): read by the metrics at each scrape.
LOCAL_RESOURCE_ERRORS: Counter[str] = Counter()


def local_error(exc: BaseException | None) -> LocalResourceError | None:
    """`LocalResourceError` (counted) when ``exc`` or an error it was raised from is one of
    `LOCAL_ERRNOS`; else None."""
    seen = 0
    while exc is not None and seen < 8:
        # a cause chain is short; a cycle is not followed
        if isinstance(exc, OSError) and exc.errno in LOCAL_ERRNOS:
            return _counted(exc.errno)
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def local_error_in(details: str) -> LocalResourceError | None:
    """`LocalResourceError` (counted) when a gRPC status's ``details`` name one of
    `LOCAL_ERRNOS` in the socket layer's words; else None."""
    for words, number in _WORDS:
        if words in details:
            return _counted(number)
    return None


def _counted(number: int) -> LocalResourceError:
    name = errno.errorcode.get(number, str(number))
    LOCAL_RESOURCE_ERRORS[name] += 1
    return LocalResourceError(
        f"the gateway is short of its own resources ({name}: {os.strerror(number)}); "
        "not the replica's fault"
    )
