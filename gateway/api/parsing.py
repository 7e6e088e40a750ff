"""Parses infer requests inline when small and off the event loop when large.

Below ``parse_inline_max_bytes`` (where parsing and checking a body starts to stall the loop)
the hot path parses inline. Above it, the body goes to an *offload*, chosen by name:
``process`` (default) hands it to a worker process (`gateway.api.parse_worker`); ``thread``
uses ``asyncio.to_thread``, which frees nothing here because orjson holds the GIL for the
whole parse (measured: a large body stalls the loop as long in a thread as inline; figures on
docs/measured.md), and is kept to show that; ``inline`` parses on the loop at any size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import struct
import sys
from pathlib import Path
from typing import Protocol

from gateway.api.parse_worker import FRAME
from gateway.errors import GatewayError
from gateway.v2.body import Body
from gateway.v2.request import InferRequestInfo, check_infer_request

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # where `gateway` is importable


class Offload(Protocol):
    async def parse(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo: ...

    async def close(self) -> None: ...


class InlineOffload:
    async def parse(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo:
        return check_infer_request(body, header_length, max_rows)

    async def close(self) -> None:
        pass


class ThreadOffload(InlineOffload):
    async def parse(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo:
        return await asyncio.to_thread(check_infer_request, body, header_length, max_rows)


class WorkerGone(Exception):
    """The worker process died or broke the protocol; it is restarted on next use."""


class ParseWorker:
    """One ``parse_worker`` child process, parsing one request at a time."""

    def __init__(self) -> None:
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> asyncio.subprocess.Process:
        if self._process is None or self._process.returncode is not None:
            path = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.api.parse_worker",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": path},
            )  # fmt: skip
        return self._process

    async def parse(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo:
        process = await self.start()
        assert process.stdin is not None and process.stdout is not None  # PIPEs above
        message = pickle.dumps((header_length, max_rows))
        try:
            process.stdin.write(struct.pack("<QQ", len(message), len(body)) + message)
            process.stdin.writelines(body.pieces)  # as it arrived: not joined here
            await process.stdin.drain()
            (size,) = FRAME.unpack(await process.stdout.readexactly(FRAME.size))
            kind, value = pickle.loads(await process.stdout.readexactly(size))
        except (OSError, asyncio.IncompleteReadError, pickle.UnpicklingError) as exc:
            await self.close()
            raise WorkerGone(f"parse worker failed: {exc!r}") from exc
        if kind == "ok" and isinstance(value, InferRequestInfo):
            return value
        if kind == "error" and isinstance(value, GatewayError):
            raise value
        raise WorkerGone(f"parse worker: {value}")

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    async def close(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the worker exits at the end of its input
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


class ProcessOffload:
    """A small pool of `ParseWorker` processes; a request waits for an idle one."""

    def __init__(self, workers: int) -> None:
        self._workers = [ParseWorker() for _ in range(workers)]
        self._idle: asyncio.Queue[ParseWorker] | None = None

    async def start(self) -> None:
        for worker in self._workers:
            await worker.start()

    async def parse(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo:
        # shielded: a cancelled caller must not leave a worker with an unread answer
        return await asyncio.shield(self._exchange(body, header_length, max_rows))

    async def _exchange(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo:
        if self._idle is None:
            self._idle = asyncio.Queue()
            for worker in self._workers:
                self._idle.put_nowait(worker)
        worker = await self._idle.get()
        try:
            return await worker.parse(body, header_length, max_rows)
        except WorkerGone:
            log.warning("parse worker failed; parsing this request inline", exc_info=True)
            return check_infer_request(body, header_length, max_rows)
        finally:
            self._idle.put_nowait(worker)

    def pids(self) -> list[int]:
        return [pid for pid in (worker.pid for worker in self._workers) if pid is not None]

    async def close(self) -> None:
        await asyncio.gather(*(worker.close() for worker in self._workers))


class RequestParser:
    """What the infer endpoint parses with; ``inline_max_bytes`` is the hot path's limit,
    ``fast_inline_max_bytes`` the fast JSON path's (`gateway.pipeline.edge_steps.Parse`)."""

    def __init__(
        self,
        inline_max_bytes: int,
        offload: str = "process",
        workers: int = 1,
        fast_inline_max_bytes: int = 0,
    ) -> None:
        self.inline_max_bytes = inline_max_bytes
        self.fast_inline_max_bytes = fast_inline_max_bytes
        self._processes = ProcessOffload(workers) if offload == "process" else None
        offloads: dict[str, Offload] = {"thread": ThreadOffload(), "inline": InlineOffload()}
        self._offload: Offload = self._processes or offloads[offload]

    async def start(self) -> None:
        """Starts the worker processes (if any) so the first large body does not wait."""
        if self._processes is not None:
            await self._processes.start()

    async def offload(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo:
        return await self._offload.parse(body, header_length, max_rows)

    def worker_pids(self) -> list[int]:
        """The worker processes running now (none until the first large body, or `start`)."""
        return self._processes.pids() if self._processes is not None else []

    async def close(self) -> None:
        await self._offload.close()
