"""One request's handler run as its task: what it leaves unanswered is answered for it.

A `GatewayError` the handler lets out becomes its JSON answer (``{"error": ...}`` with the
error's status and headers); any other exception is logged and answered 500; a handler that
returns without answering is logged and answered 500; a streamed answer left unfinished is
cut, so the client never takes it for whole. Errors after the answer are only logged, and a
cancelled handler (its client left) ends quietly.
"""

from __future__ import annotations

import logging

from gateway.errors import GatewayError
from gateway.worker.http.answer import Answer
from gateway.worker.http.request import Request
from gateway.worker.http.router import Handler

log = logging.getLogger(__name__)


async def serve(handler: Handler, request: Request, answer: Answer) -> None:
    """Runs a request's handler; its error, or its missing answer, becomes a JSON answer if
    it can. A cancelled handler (its client left) ends quietly."""
    try:
        await handler(request, answer)
    except GatewayError as error:
        failed(answer, error)
    except Exception as error:  # its own bug: logged, and a 500 where one can still go
        failed(answer, error)
    else:
        if not answer.complete:
            failed(answer, None)


def failed(answer: Answer, error: Exception | None) -> None:
    if answer.complete or answer.dropped:
        if error is not None and not isinstance(error, GatewayError):
            log.error("request handler failed after its answer", exc_info=error)
        return
    if answer.started:  # a streamed answer it did not end
        if error is not None:
            log.error("request handler failed while streaming its answer", exc_info=error)
        answer.abort()
        return
    if isinstance(error, GatewayError):
        lines = b"".join(
            b"%s: %s\r\n" % (name.encode(), value.encode())
            for name, value in error.headers().items()
        )
        answer.send_error(error.status, error.message, lines)
        return
    if error is not None:
        log.error("request handler failed", exc_info=error)
    else:
        log.error("request handler returned without an answer")
    answer.send_error(500, "internal server error")
