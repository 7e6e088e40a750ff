"""A toy data-plane worker: accepts on an inherited listening socket and answers every
request with its own PID, after a little work (so a busy worker leaves the next connection to
another). Usage: ``toy_worker.py FD MARKERS [--ignore-term] [--exit CODE]``.

It writes ``MARKERS/ready-PID`` once its SIGTERM handler is in place, and ``MARKERS/term-PID``
when SIGTERM comes; it then exits 0, or carries on with ``--ignore-term``. ``--exit CODE``:
exits at once with CODE (a worker that crash-loops).
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
        sys.exit(int(flags[flags.index("--exit") + 1]))
    ignore_term = "--ignore-term" in flags

    def on_term(signum: int, frame: FrameType | None) -> None:
        (markers / f"term-{os.getpid()}").touch()
        if not ignore_term:
            sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    listener = socket.socket(fileno=fd)
    (markers / f"ready-{os.getpid()}").touch()
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
