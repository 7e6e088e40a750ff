"""gRPC's ``ModelStreamInfer``: many ModelInfer requests on one call, each answered on it.

What tritonclient's ``start_stream`` / ``async_stream_infer`` use (Triton serves it for every
model; decoupled models are the case that needs it). Each request on the stream is the
unary door's (`gateway.grpc_door.infer.InferDoor.answer`): the same edge, checks, limits,
pipeline and records, under the stream's metadata (key, request id, trace) and deadline. The
answers go back as they complete, not in the order asked, each a ``ModelStreamInferResponse``
carrying the response (its ``id`` is the request's) or, as Triton does, an ``error_message``
(with the request's id in ``infer_response``, so a client can tell which request failed); a
refused request never ends the stream.

At most ``server.grpc.stream_answers`` requests of one stream are served or answered but not yet
written at once: the next request is read only when an answer has been handed to gRPC, which
writes it as the client's HTTP/2 window allows, so a client that stops reading its answers stops
its own requests (they wait in gRPC's flow control, not in the gateway's memory). Each request is
read as a unary call's message is (`gateway.grpc_door.receive`: under the in-flight bytes and
the body timeout, which bounds a stream idle between requests too); a refused read ends the
stream with its code once the requests in flight are answered. When the client ends its side,
the requests in flight are answered, then the stream ends; when it cancels, they are cancelled
(and recorded as 499, as a cancelled unary call is).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from gateway.grpc_door.infer import GrpcAnswer, InferDoor
from gateway.grpc_door.receive import CallRefused, Received
from v2proto.grpc import grpc_service_pb2 as pb

Context = grpc.aio.ServicerContext[Any, Any]
# requests of one stream served or waiting to be written, by default
IN_FLIGHT = 64


class StreamDoor:
    def __init__(self, door: InferDoor, in_flight: int = IN_FLIGHT) -> None:
        self._door = door
        self._in_flight = in_flight

    async def __call__(
        self, requests: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        metadata = context.invocation_metadata()
        answers: asyncio.Queue[GrpcAnswer | None] = asyncio.Queue()
        # served, or answered and not yet written
        slots = asyncio.Semaphore(self._in_flight)
        serving: set[asyncio.Task[None]] = set()
        refused: list[CallRefused] = []
        message_reader = self._door.reader

        async def serve(received: Received) -> None:
            answer = await self._door.answer(
                received.data, metadata, context.time_remaining, received.hold
            )
            answers.put_nowait(answer)

        async def read() -> None:
            try:
                try:
                    while True:
                        await slots.acquire()
                        received = await message_reader.read(context)
                        if received is None:
                            # the client's side ended
                            break
                        task = asyncio.create_task(serve(received))
                        serving.add(task)
                        task.add_done_callback(serving.discard)
                except CallRefused as refusal:
                    refused.append(refusal)
                while serving:
                    # answer what is in flight
                    await asyncio.wait(set(serving))
            finally:
                # the end, however reading ended
                answers.put_nowait(None)

        reader = asyncio.create_task(read())
        answer: GrpcAnswer | None = None
        try:
            while (answer := await answers.get()) is not None:
                # back here once gRPC has written it
                yield stream_response(answer)
                _written(answer, context)
                slots.release()
            # a failure to read the stream ends the call with it
            await reader
            if refused:
                context.set_trailing_metadata(refused[0].metadata)
                await context.abort(refused[0].code, refused[0].message)
        finally:
            if answer is not None:
                # ended while gRPC wrote it, or before
                _written(answer, context)
            reader.cancel()
            for task in list(serving):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(reader, *serving, return_exceptions=True)
            _unsent(answers, context)


def _written(answer: GrpcAnswer, context: Context) -> None:
    """Gives an answer's bytes back within the in-flight bytes (a second call does nothing)."""
    if answer.written is not None:
        answer.written(context)


def _unsent(answers: asyncio.Queue[GrpcAnswer | None], context: Context) -> None:
    """The answers of a stream that ended before they were written: their bytes go back."""
    while not answers.empty():
        answer = answers.get_nowait()
        if answer is not None:
            _written(answer, context)


def stream_response(answer: GrpcAnswer) -> pb.ModelStreamInferResponse:
    if answer.response is not None:
        return pb.ModelStreamInferResponse(infer_response=answer.response)
    named = pb.ModelInferResponse(id=answer.request_id)
    return pb.ModelStreamInferResponse(error_message=answer.message, infer_response=named)
