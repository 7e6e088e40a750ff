"""The docs' examples, run as printed: every fenced block right after a ``<!-- docs-test: ... -->``
comment in docs/*.md.

``<!-- docs-test: stack -->``: run against `make run`'s stack (config/local.yaml's replicas and a
real gateway, tests.support.local_stack), with the gateway's ports put in place of :8000 and
:8001. ``<!-- docs-test: shell -->``: run as it is from the repository root, with the venv's
commands on PATH. A ``sh``/``bash`` block must exit 0; a ``python`` block must exit 0 and print,
line by line, what the ``# ...`` comments of its ``print(`` lines promise.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.local_stack import local_stack
from tests.support.processes import REPO_ROOT

DOCS = REPO_ROOT / "docs"
MARKED = re.compile(r"^<!-- docs-test: (stack|shell) -->\n```(\w+)\n(.*?)^```$", re.M | re.S)
RUN_TIMEOUT_S = 120


@dataclass(frozen=True)
class Example:
    page: str
    kind: str
    language: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page}:{self.language}:{zlib.crc32(self.code.encode()):08x}"


def examples() -> list[Example]:
    return [
        Example(page.name, kind, language, code)
        for page in sorted(DOCS.glob("*.md"))
        for kind, language, code in MARKED.findall(page.read_text(encoding="utf-8"))
    ]


def promised(block: str) -> list[str]:
    return [
        line.split("# ", 1)[1].strip()
        for line in block.splitlines()
        if line.startswith("print(") and "# " in line
    ]


def run(example: Example, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if example.language == "python":
        argv = [sys.executable, "-c", code]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", code]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )


def check(example: Example, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"{example.id}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    if example.language == "python":
        assert done.stdout.strip().splitlines() == promised(example.code)


def test_the_docs_have_marked_examples_of_both_kinds() -> None:
    kinds = {(e.kind, e.language) for e in examples()}
    assert {("stack", "python"), ("stack", "sh"), ("shell", "sh")} <= kinds


@pytest.mark.parametrize(
    "example", [e for e in examples() if e.kind == "shell"], ids=lambda e: e.id
)
def test_a_shell_example_runs_as_printed(example: Example) -> None:
    check(example, run(example, example.code))


@pytest.fixture(scope="module")
def stack(models_dir: Path) -> Iterator[GatewayProcess]:
    with local_stack(models_dir, grpc=True) as gateway:
        yield gateway


@pytest.mark.integration
@pytest.mark.parametrize(
    "example", [e for e in examples() if e.kind == "stack"], ids=lambda e: e.id
)
def test_a_stack_example_answers_as_printed(example: Example, stack: GatewayProcess) -> None:
    assert stack.grpc_port is not None
    code = example.code.replace(":8000", f":{stack.port}").replace(":8001", f":{stack.grpc_port}")
    assert code != example.code, "a stack example calls the gateway on :8000 or :8001"
    check(example, run(example, code))
