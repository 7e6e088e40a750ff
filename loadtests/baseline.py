"""The gateway "before": another commit's tree, extracted so that its gateway runs beside ours.

The scaling benchmark compares data-plane workers with the single process the gateway was
before them, in one run. Before ``gateway serve`` had ``--workers``, this tree *is* that single
process; once it has them, the single process lives only in history, so the benchmark extracts
a commit (``git archive``, into the stack's work folder) and starts that tree's gateway, with the
same Python and packages. Which commit: ``--baseline REF`` when given, else main's last commit
before its CLI mentioned ``--workers`` (`first_without_workers`).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from loadtests.stack import ROOT

CLI = "gateway/cli"  # where ``gateway serve``'s options are declared
GIT_TIMEOUT_S = 60.0


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, timeout=GIT_TIMEOUT_S, check=False
    )


def python_env(tree: Path) -> dict[str, str]:
    """The environment that makes ``python -m gateway...`` import ``tree``'s packages (before
    any path already on ``PYTHONPATH``, where the packages may have been installed)."""
    paths = [str(tree), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def supports_workers(tree: Path = ROOT) -> bool:
    """Whether ``tree``'s ``gateway serve --help`` offers ``--workers``."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=tree,
        env=python_env(tree),
        timeout=GIT_TIMEOUT_S,
        check=False,
    )
    return done.returncode == 0 and "--workers" in done.stdout


def first_without_workers() -> str | None:
    """The last commit before ``--workers`` reached the CLI: the parent of the oldest commit
    on the first-parent line (main's own history: a merge, not a commit inside the merged
    branch) that added the string under ``gateway/cli``; None if git finds none."""
    done = _git("log", "--first-parent", "--reverse", "--format=%H", "-S--workers", "--", CLI)
    commits = done.stdout.decode().split() if done.returncode == 0 else []
    if not commits:
        return None
    parent = _git("rev-parse", "--verify", "--quiet", f"{commits[0]}^")
    if parent.returncode != 0:
        return None
    return parent.stdout.decode().strip()


def resolve(ref: str) -> str:
    """The commit ``ref`` names; ValueError if git knows none."""
    done = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0:
        raise ValueError(f"git knows no commit {ref!r}")
    return done.stdout.decode().strip()


def extract(commit: str, into: Path) -> Path:
    """``commit``'s tracked files under ``into`` (a new folder); returns it."""
    done = _git("archive", "--format=tar", commit)
    if done.returncode != 0:
        raise RuntimeError(f"git archive {commit}: {done.stderr.decode()[-500:]}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into
