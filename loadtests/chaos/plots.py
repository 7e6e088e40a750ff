"""The PNG a person looks at: five panels over time with the fault windows shaded.

Throughput, p50/p99 latency, error rate, degraded rate and wrong-answer rate, one point per
second (at the middle of its second), sharing one time axis. matplotlib is imported only
here and only when a plot is drawn, so the rest of the package works without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from loadtests.chaos.stats import Totals, Window

SHADE = "#f4a259"


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def timeline(
    path: Path,
    title: str,
    seconds: Sequence[Totals],
    windows: Sequence[Window],
    deadline_ms: float | None = None,
) -> Path | None:
    """Write the five-panel timeline to ``path``; None if matplotlib is missing."""
    if not available():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [i + 0.5 for i in range(len(seconds))]
    panels = [
        ("req/s", [[s.rate for s in seconds]], ["sent"]),
        ("latency ms", [[s.p50_ms for s in seconds], [s.p99_ms for s in seconds]], ["p50", "p99"]),
        ("failed %", [[s.failed_rate * 100 for s in seconds]], ["failed"]),
        ("degraded %", [[s.degraded_rate * 100 for s in seconds]], ["degraded"]),
        ("wrong %", [[s.wrong_rate * 100 for s in seconds]], ["wrong"]),
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 10), sharex=True)
    for ax, (label, series, names) in zip(axes, panels, strict=True):
        for values, name in zip(series, names, strict=True):
            ax.plot(x, values, marker=".", linewidth=1.2, label=name)
        for w in windows:
            ax.axvspan(w.start, max(w.end, w.start + 0.05), color=SHADE, alpha=0.3, lw=0)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        top = max((v for vs in series for v in vs if not math.isnan(v)), default=0.0)
        if label.startswith("latency"):  # a hang's seconds and a healthy millisecond, both
            ax.set_yscale("log")
            ax.set_ylim(bottom=0.5, top=max(top * 1.5, 10.0))
        else:
            ax.set_ylim(bottom=0, top=max(top * 1.15, 1.0))
        if len(names) > 1:
            ax.legend(loc="upper right", fontsize=8)
    if deadline_ms is not None and axes[1].get_ylim()[1] >= deadline_ms:
        axes[1].axhline(deadline_ms, color="red", linestyle="--", linewidth=0.8)
    for w in windows:
        axes[0].text(
            w.start,
            axes[0].get_ylim()[1] * 0.97,
            w.label,
            fontsize=7,
            va="top",
            ha="left",
            color="#8a4b08",
        )
    axes[-1].set_xlabel("seconds since the first request (shaded: fault windows)")
    axes[0].set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
