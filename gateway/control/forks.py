"""Workers forked from a process that has done their imports, instead of started anew.

Most of a worker's start is imports (a second or more of CPU on a busy machine), paid again by
every worker, every replacement and every standby. The control process forks one *fork
server* before it opens anything or starts a thread or a loop; the fork server imports the
worker's modules once, freezes them out of the garbage collector's sight (so their pages stay
shared), and waits. A `Spawn` from `ForkServer.spawner` sends it a worker's command line and
the file descriptors the worker inherits (``SCM_RIGHTS``); it forks twice, so that the worker
is not its child but, once the middle process has exited, the control process's (which made
itself a child subreaper for that), and answers the worker's PID. The control process watches
that child through a pidfd on its loop and reaps it as `asyncio` would (`ForkedChild`).

A forked worker starts as a ``python -m gateway.worker`` does: its own session, stdin from
``/dev/null``, the descriptors at the numbers its command line names, the signal handlers a
new interpreter has (SIGPIPE ignored), ``PR_SET_PDEATHSIG`` to the control process, then
`gateway.worker.main.main`. Its command line in ``ps`` is the control process's (its name,
``comm``, says ``gw-worker``).

Where any of this is missing (not Linux, no pidfd, no subreaper) or asked not to be
(`WORKER_PREFIX_ENV`: a worker under a profiler is a new program), or once the fork server is
gone, workers are started anew (`gateway.control.spawn.process_spawner`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import gc
import importlib
import json
import logging
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.control.spawn import PR_SET_PDEATHSIG, Spawn, WorkerArgv, prctl, process_spawner

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
PR_SET_NAME = 15
# the module a worker's command line runs (`ControlPlane._argv`), and its ``main``: named, as
# the command line names it (the worker sits above the control in the layers)
WORKER_MODULE = ("-m", "gateway.worker")
WORKER_MAIN = "gateway.worker.main"
# a request: the command line, descriptor numbers and environment, as JSON
MAX_REQUEST_BYTES = 1 << 20
MAX_FDS = 16
# how long a spawn waits for the fork server's answer before starting the worker anew
ANSWER_S = 10.0
# how long a forked worker waits to become the control process's child
REPARENT_S = 5.0


class ForkServer:
    """The control process's end of a fork server: `start` it first, `close` it last."""

    def __init__(self, pid: int, sock: socket.socket) -> None:
        self.pid = pid
        self._sock = sock
        self._lock = asyncio.Lock()
        # false once it failed or closed: workers are started anew from then on
        self.alive = True

    @classmethod
    def start(cls) -> ForkServer | None:
        """A fork server, forked from this process now (call it before any thread, loop or
        descriptor of its own); None where workers are better started anew."""
        call = prctl()
        if call is None or not hasattr(os, "pidfd_open") or not hasattr(socket, "send_fds"):
            return None
        if call(PR_SET_CHILD_SUBREAPER, 1) != 0:
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        control = os.getpid()
        pid = os.fork()
        if pid == 0:
            ours.close()
            code = 1
            try:
                code = _serve(theirs, control)
            finally:
                os._exit(code)
        theirs.close()
        ours.setblocking(False)
        return cls(pid, ours)

    def spawner(
        self,
        argv: WorkerArgv,
        pass_fds: Sequence[int],
        *,
        env: Mapping[str, str] | None = None,
        die_with_parent: bool = True,
    ) -> Spawn:
        """`process_spawner`'s contract, the worker forked here; started anew where its
        command line is not a plain worker's or the fork server does not answer."""
        fds = tuple(pass_fds)
        anew = process_spawner(argv, fds, env=env, die_with_parent=die_with_parent)

        async def spawn(index: int) -> Any:
            line = list(argv(index))
            if not self.alive or line[1:3] != list(WORKER_MODULE):
                return await anew(index)
            wanted = None if env is None else dict(env)
            request = {"argv": line[3:], "fds": fds, "env": wanted, "die": die_with_parent}
            try:
                pid = await self._fork(json.dumps(request).encode(), fds)
            except (OSError, TimeoutError, ValueError) as exc:
                self.alive = False
                log.warning("the fork server failed (%s): workers are started anew", exc)
                return await anew(index)
            return ForkedChild(pid)

        return spawn

    async def _fork(self, request: bytes, fds: Sequence[int]) -> int:
        loop = asyncio.get_running_loop()
        async with self._lock:
            socket.send_fds(self._sock, [request], list(fds))
            answer = await asyncio.wait_for(loop.sock_recv(self._sock, 64), ANSWER_S)
        if not answer:
            raise OSError("the fork server exited")
        pid = int(answer)
        if pid <= 0:
            raise OSError("the fork server could not fork")
        return pid

    def close(self, grace_s: float = 1.0) -> None:
        """EOF to the fork server, which then exits; reaped here (killed past ``grace_s``)."""
        self.alive = False
        self._sock.close()
        until = time.monotonic() + grace_s
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > until:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    return
                time.sleep(0.005)


class ForkedChild:
    """A forked worker, this process's child once its fork server's middle process exited:
    watched through a pidfd on the running loop, reaped here, signalled through the pidfd
    (never another process that took its PID after it was reaped)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = self._loop.create_future()
        self._pidfd: int | None = os.pidfd_open(pid)
        self._loop.add_reader(self._pidfd, self._reap)

    def _reap(self) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            # not ours to reap: it never became this process's child
            pid, status = self.pid, 255 << 8
        if pid == 0:
            return
        self._close_pidfd()
        self.returncode = os.waitstatus_to_exitcode(status)
        if not self._exited.done():
            self._exited.set_result(self.returncode)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, sig: int) -> None:
        if self._pidfd is None:
            raise ProcessLookupError(self.pid)
        signal.pidfd_send_signal(self._pidfd, sig)


# --- the fork server's side ----------------------------------------------------------------


def _serve(sock: socket.socket, control: int) -> int:
    """The fork server's life: the worker's imports, then one fork a request, until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    call = prctl()
    if call is not None:
        call(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != control:
        return 0
    # what every worker would import
    importlib.import_module(WORKER_MAIN)
    gc.collect()
    gc.freeze()
    while True:
        message, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, MAX_FDS)
        if not message:
            return 0
        try:
            pid = _fork_worker(sock, json.loads(message), fds, control)
        except Exception:
            traceback.print_exc()
            pid = -1
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(b"%d" % pid)


def _fork_worker(sock: socket.socket, request: dict[str, Any], fds: list[int], control: int) -> int:
    """Forks the middle process, which forks the worker and exits; the worker's PID."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read_end)
        try:
            os.setsid()
            worker = os.fork()
            if worker == 0:
                os.close(write_end)
                _become_worker(sock, request, fds, control)
            os.write(write_end, b"%d" % worker)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(middle, 0)
    return int(answer) if answer.isdigit() else -1


def _become_worker(
    sock: socket.socket, request: dict[str, Any], fds: list[int], control: int
) -> None:
    """The worker's side of the fork, as a new ``python -m gateway.worker`` would start; it
    never returns."""
    code = 1
    try:
        sock.close()
        _descriptors(fds, [int(fd) for fd in request["fds"]])
        _stdin_from_devnull()
        # as a new interpreter starts: SIGINT raises KeyboardInterrupt, SIGPIPE and SIGXFSZ
        # stay ignored (a write to a peer that left is an error, not the process's end)
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_IGN)
        gc.unfreeze()
        env = request.get("env")
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        call = prctl()
        if call is not None:
            call(PR_SET_NAME, b"gw-worker")  # type: ignore[arg-type]
            _become_child_of(control, call if request.get("die", True) else None)
        main = importlib.import_module(WORKER_MAIN).main
        code = int(main([str(arg) for arg in request["argv"]]))
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _descriptors(received: list[int], targets: list[int]) -> None:
    """Each received descriptor at the number the command line names (inheritable, as
    ``pass_fds`` leaves them), by way of numbers above every target."""
    floor = max([*targets, *received, 2]) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, floor) for fd in received]
    for fd in received:
        os.close(fd)
    received.clear()
    for fd, target in zip(moved, targets, strict=True):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)


def _stdin_from_devnull() -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _become_child_of(control: int, call: Any) -> None:
    """Waits (bounded) until the middle process exited and the control process adopted this
    one, then asks for SIGTERM when it dies; exits if it died first."""
    until = time.monotonic() + REPARENT_S
    while os.getppid() != control:
        if time.monotonic() > until:
            os._exit(1)
        time.sleep(0.001)
    if call is not None:
        call(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != control:
            os._exit(0)
