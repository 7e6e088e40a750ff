"""Each benchmark's latest table, saved with its date and machine for the performance page.

The benchmarks print a Markdown table; `save` also writes it to
``loadtests/results/bench/<name>.json`` with when it ran (UTC), on what machine (CPUs, load
average, Python) and the command line, so `loadtests/perf_page.py` can build
docs/performance.md from what the benchmarks measured, never from numbers copied by hand.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent / "results" / "bench"


def machine() -> dict[str, object]:
    """What the figures depend on: the CPUs, how busy they were, the interpreter."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in load],
        "system": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "python": platform.python_version(),
    }


def save(name: str, table: str, folder: Path = BENCH_DIR) -> Path:
    """Writes ``table`` (Markdown) as benchmark ``name``'s latest result; returns the file."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "bench": name,
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": " ".join(["python", *sys.argv]),
        "table": table,
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
