"""A toy data-plane worker: accepts on an inherited listening socket and answers every
request with its own PID, after a little work (so a busy worker leaves the next connection to
another). Usage: ``toy_worker.py FD MARKERS [--ignore-term] [--exit CODE] [--start-s S]
[--index-fd FD]``.

It writes ``MARKERS/ready-PID`` (holding its index, if it was told one) once its SIGTERM
handler is in place and it serves, and ``MARKERS/term-PID`` when SIGTERM comes; it then exits
0, or carries on with ``--ignore-term``. ``--exit CODE``: exits at once with CODE (a worker
that crash-loops). ``--start-s S``: takes S seconds to start (a real worker's imports), then
writes ``MARKERS/warm-PID``. ``--index-fd FD``: a standby (`gateway.control.standby`): reads
its index from FD to EOF before serving, and exits 0 on EOF with no index.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

WORK_S = 0.02


def main(fd: int, markers: Path, flags: list[str]) -> None:
    if "--exit" in flags:
        sys.exit(int(option(flags, "--exit", "")))
    ignore_term = "--ignore-term" in flags

    def on_term(signum: int, frame: FrameType | None) -> None:
        (markers / f"term-{os.getpid()}").touch()
        if not ignore_term:
            sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    time.sleep(float(option(flags, "--start-s", "0")))
    (markers / f"warm-{os.getpid()}").touch()
    index = ""
    if "--index-fd" in flags:
        with open(int(option(flags, "--index-fd", "")), "rb") as pipe:
            index = pipe.read().decode().strip()
        if not index:
            sys.exit(0)
    listener = socket.socket(fileno=fd)
    (markers / f"ready-{os.getpid()}").write_text(index)
    while True:
        readable, _, _ = select.select([listener], [], [], 1.0)
        if not readable:
            continue
        try:
            conn, _ = listener.accept()
        except BlockingIOError:  # another worker took it
            continue
        with conn:
            answer(conn)


def option(flags: list[str], name: str, default: str) -> str:
    return flags[flags.index(name) + 1] if name in flags else default


def answer(conn: socket.socket) -> None:
    conn.settimeout(5.0)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk:
            return
        head += chunk
    time.sleep(WORK_S)
    body = str(os.getpid()).encode()
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
