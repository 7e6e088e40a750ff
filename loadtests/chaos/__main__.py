"""``python -m loadtests.chaos``: run chaos scenarios and write their reports and the table.

The whole suite is bounded (about 16 s of load per scenario plus start-up, a few minutes in
all); ``--smoke`` runs short versions (the crash scenario alone unless ``--scenario`` says
otherwise) for `make test`. Exit code 1 if a scenario that ran failed its objective.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from loadtests.chaos.report import write_scenario, write_suite
from loadtests.chaos.runner import ERROR, FAIL, run_scenario
from loadtests.chaos.scenarios import BY_NAME, FULL, SCENARIOS, SMOKE, SMOKE_SCENARIO
from loadtests.stack import ROOT, raise_on_sigterm

DEFAULT_OUT = ROOT / "loadtests" / "results"


def clear(folder: Path) -> None:
    """Remove what an earlier run of this scenario wrote, so no stale plot or log remains."""
    shutil.rmtree(folder / "logs", ignore_errors=True)
    for name in ("README.md", "result.json", "seconds.csv", "timeline.png"):
        (folder / name).unlink(missing_ok=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.chaos", description=__doc__)
    parser.add_argument("--scenario", action="append", choices=sorted(BY_NAME), default=[],
                        help="run this scenario (repeatable); default: all")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="short runs, relaxed bounds")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--workers", type=int, default=2, help="the gateway's data-plane workers")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        for s in SCENARIOS:
            print(f"{s.name:16} {s.title}" + (f"  [needs {s.needs}]" if s.needs else ""))
        return 0
    names = args.scenario or ([SMOKE_SCENARIO] if args.smoke else [s.name for s in SCENARIOS])
    timing = SMOKE if args.smoke else FULL
    raise_on_sigterm()  # unwinds through every finally: all PIDs stopped
    failed = 0
    for name in names:
        began = time.monotonic()
        folder = args.out / name
        clear(folder)
        result = run_scenario(BY_NAME[name], timing, folder / "logs", args.smoke, args.workers)
        readme = write_scenario(result, folder)
        failed += result.status in (FAIL, ERROR)
        note = f" {result.note}" if result.note else ""
        print(f"{name:16} {result.status.upper():8} {time.monotonic() - began:5.1f} s  "
              f"{readme}{note}", flush=True)  # fmt: skip
    print(f"suite table: {write_suite(args.out)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
