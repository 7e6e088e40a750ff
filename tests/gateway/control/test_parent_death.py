"""A control process killed without stopping its workers (SIGKILL, a crash): the kernel sends
each worker SIGTERM (``PR_SET_PDEATHSIG``, set by `process_spawner`), so none keeps serving
unsupervised or holds the port from the next control process."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.support.processes import wait_until_async

TOY_WORKER = Path(__file__).with_name("toy_worker.py")


async def test_workers_die_with_their_control_process(tmp_path: Path) -> None:
    script = tmp_path / "control.py"
    script.write_text(CONTROL_SCRIPT)
    markers = tmp_path / "markers"
    markers.mkdir()
    control = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        str(TOY_WORKER),
        str(markers),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert control.stdout is not None
    try:
        line = await asyncio.wait_for(control.stdout.readline(), 20.0)
        workers = [int(pid) for pid in line.split()]
        assert len(workers) == 2, line
        await wait_until_async(
            lambda: (
                {p.name for p in markers.glob("ready-*")} >= {f"ready-{pid}" for pid in workers}
            ),
            10.0,
            message="workers ready",
        )
    finally:
        control.kill()
        await control.wait()
    await wait_until_async(
        lambda: all(exited(pid) for pid in workers), 10.0, message="orphaned workers exited"
    )
    assert {p.name for p in markers.glob("term-*")} == {f"term-{pid}" for pid in workers}


def exited(pid: int) -> bool:
    """Whether a process that is not our child has exited (a zombie its reaper has not yet
    reaped counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


CONTROL_SCRIPT = """\
import asyncio, socket, sys
from gateway.control.sockets import rest_listener
from gateway.control.spawn import process_spawner
from gateway.control.supervisor import Supervisor

async def main():
    listener = rest_listener("127.0.0.1", 0)
    fd = listener.fileno()
    spawn = process_spawner(lambda i: [sys.executable, sys.argv[1], str(fd), sys.argv[2]], [fd])
    supervisor = Supervisor(spawn, 2)
    await supervisor.start()
    print(*supervisor.pids, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""
