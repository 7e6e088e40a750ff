"""The README's "Calling it" examples, run as printed against `make run`'s config.

The curl and tritonclient examples are taken from README.md itself (only the gateway's port is
changed: the test's gateway listens on a free one), sent to real replicas and a real gateway
configured as ``config/local.yaml`` (its pools, replica ids and models; only the addresses
differ), and every output the README promises in a comment is checked: the curl answer's label,
and the voted example's labels and its ``parameters`` (``{'vote': '3/3'}``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess
from tests.support.local_stack import local_stack
from tests.support.processes import REPO_ROOT

pytestmark = pytest.mark.integration

README = REPO_ROOT / "README.md"
MAKE_RUN_PORT = "8000"
RUN_TIMEOUT_S = 120


def section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def fenced(text: str, language: str) -> str:
    """The first ```language block of ``text``, without its fences."""
    found = re.search(rf"^```{language}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    assert found is not None, f"no ```{language} block"
    return found.group(1)


def promised(block: str) -> list[str]:
    """What the block's trailing ``# ...`` comments on print lines say it prints, in order."""
    return [
        line.split("# ", 1)[1].strip()
        for line in block.splitlines()
        if line.startswith("print(") and "# " in line
    ]


def on_port(block: str, port: int) -> str:
    """The block as printed, but calling the test's gateway instead of :8000."""
    assert f":{MAKE_RUN_PORT}" in block
    return block.replace(f":{MAKE_RUN_PORT}", f":{port}")


@pytest.fixture(scope="module")
def make_run_stack(models_dir: Path) -> Iterator[GatewayProcess]:
    """config/local.yaml's pools and models behind a real gateway (tests.support.local_stack)."""
    with local_stack(models_dir) as gateway:
        yield gateway


def test_the_curl_example_answers_its_digit(make_run_stack: GatewayProcess) -> None:
    block = fenced(section(README.read_text(), "## Calling it"), "sh")
    done = subprocess.run(
        ["bash", "-c", on_port(block, make_run_stack.port)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=True,
    )
    answer = json.loads(done.stdout)
    assert answer["model_name"] == "digits"
    label = next(o for o in answer["outputs"] if o["name"] == "label")
    assert label["data"] == [0]  # as the comment under it says
    assert '"data":[0]' in block


def test_the_voted_tritonclient_example_answers_3_of_3_and_reads_the_parameters(
    make_run_stack: GatewayProcess,
) -> None:
    block = fenced(section(README.read_text(), "## Calling it"), "python")
    assert 'client.infer("digits-vote"' in block and "np.random" not in block
    done = subprocess.run(
        [sys.executable, "-c", on_port(block, make_run_stack.port)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.strip().splitlines()
    assert printed == promised(block) == ["[0 1 2 3] [0 1 2 3]", "{'vote': '3/3'}"]
