"""Structured logs: one JSON object per line, tagged with the current request and trace ids.

Operators grep and ship logs by field, and jump from a log line to its trace; so each line
carries ``request_id`` and ``trace_id`` of the request being served, read from a context
variable that the request path sets once (cheaply) and the formatter reads only when a line
is actually written. Fields given with ``extra=`` become top-level keys.
"""

from __future__ import annotations

import logging
import sys
import time
from contextvars import ContextVar, Token
from typing import IO, Any, Protocol

import orjson

_HANDLER_MARK = "_gateway_handler"
# Attributes every LogRecord has; anything else on a record came from ``extra=``, which must
# not use these names (logging raises KeyError).
RESERVED_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "taskName",
    # uvicorn's copy of msg with terminal colour codes: noise in JSON
    "color_message",
}


class HasTraceId(Protocol):
    @property
    def trace_id(self) -> str | None: ...


_Context = tuple[str, HasTraceId | None]
_request: ContextVar[_Context | None] = ContextVar("gateway_log_request", default=None)


def bind_request(request_id: str, trace: HasTraceId | None = None) -> Token[_Context | None]:
    """Tags log lines written in this context (this request's task) with its ids."""
    return _request.set((request_id, trace))


def unbind_request(token: Token[_Context | None]) -> None:
    _request.reset(token)


def current_ids() -> tuple[str | None, str | None]:
    """(request id, trace id) of the request being served here, if any."""
    context = _request.get()
    if context is None:
        return None, None
    request_id, trace = context
    return request_id, None if trace is None else trace.trace_id


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", "request_id"?, "trace_id"?, extras..., "exc"?}``."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id, trace_id = current_ids()
        if request_id is not None:
            doc["request_id"] = request_id
        if trace_id is not None:
            doc["trace_id"] = trace_id
        for key, value in vars(record).items():
            if key not in RESERVED_FIELDS and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(doc, default=str).decode()


class TextFormatter(logging.Formatter):
    """For people at a terminal: the usual line, with the request id when there is one."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        request_id, _ = current_ids()
        return line if request_id is None else f"{line} [request {request_id}]"


def configure_logging(
    json: bool = True, level: int | str = logging.INFO, stream: IO[str] | None = None
) -> logging.Handler:
    """Installs one handler on the root logger; calling it again replaces that handler."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler


def _utc(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
