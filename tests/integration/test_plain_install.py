"""`pip install .` with no extra, into a fresh venv, is a gateway: the product only, in one wheel.

The wheel is built from a copy of the package sources as pip builds it (isolated, with the
setuptools the index has, its warnings checked) and installed with its dependencies into a new
venv that does not see this one's packages. That venv's ``gateway serve`` starts on a config
without a fallback, and refuses one with a fallback at start, naming the extra that brings
onnxruntime. The wheel holds the product's packages only: no tests, no fake clocks or virtual
time.
(About 30 s: the build and the install from the package index.)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.support.processes import REPO_ROOT, ManagedProcess, free_port, http_status, wait_until

pytestmark = pytest.mark.integration

SOURCES = ("pyproject.toml", "README.md", "gateway", "replicas", "v2proto", "fallback_models")
NO_FALLBACK = {
    "pools": {"p": {"model": "digits", "replicas": [{"id": "a", "url": "http://127.0.0.1:9"}]}},
    "models": {"digits": {"pool": "p"}},
    "server": {"drain_s": 0},
}


class Installed:
    def __init__(self, root: Path, wheel: Path, build_log: str) -> None:
        self.root, self.wheel, self.build_log = root, wheel, build_log
        self.gateway = root / "venv" / "bin" / "gateway"
        self.python = root / "venv" / "bin" / "python"


def _run(argv: list[str | Path], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("plain-install")
    source = root / "src"
    source.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=skip)
        else:
            shutil.copy2(path, source / name)
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", root / "dist", source],
        root,
        300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (root / "dist").glob("v2_gateway-*.whl")
    # A venv without pip of its own (ensurepip's copy, old and uncompiled, cost more than the
    # install): this venv's pip installs into it (``--python``), resolving the wheel's
    # dependencies from the index as a plain install does.
    made = _run([sys.executable, "-m", "venv", "--without-pip", root / "venv"], root, 120)
    assert made.returncode == 0, made.stderr[-3000:]
    python = root / "venv" / "bin" / "python"
    result = _run([*_pip(python), "install", "-q", wheel], root, 600)
    assert result.returncode == 0, result.stderr[-3000:]
    return Installed(root, wheel, built.stdout + built.stderr)


def _pip(python: Path) -> list[str | Path]:
    """pip, from this venv, acting on the venv of ``python``."""
    return [sys.executable, "-m", "pip", "--python", python]


def test_the_wheel_ships_the_product_only_and_builds_without_deprecations(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
        clock = wheel.read("gateway/clock.py").decode()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"gateway", "replicas", "v2proto"}
    assert "gateway/fallback/models/MANIFEST.json" in names  # the default config's fallback
    assert not [n for n in names if "virtual_time" in n]
    assert "class FakeClock" not in clock
    assert "Deprecat" not in installed.build_log, installed.build_log[-3000:]


def test_the_plain_install_has_no_onnxruntime(installed: Installed) -> None:
    listed = _run([*_pip(installed.python), "list", "--format=freeze"], installed.root, 60)
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert "v2-gateway" in names
    assert not {n for n in names if n.startswith("onnxruntime")}


def test_gateway_serve_starts_on_a_config_without_a_fallback(installed: Installed) -> None:
    config = installed.root / "no-fallback.yaml"
    config.write_text(yaml.safe_dump(NO_FALLBACK))
    port = free_port()
    argv = [str(installed.gateway), "serve", "--config", str(config), "--port", str(port)]
    with ManagedProcess(argv, cwd=installed.root, name="plain-gateway") as gateway:
        live = f"http://127.0.0.1:{port}/v2/health/live"
        wait_until(
            lambda: http_status(live, timeout=0.5) == 200 or not gateway.alive(),
            30,
            message=lambda: f"the gateway to be live\n{gateway.log_text()[-3000:]}",
        )
        assert gateway.alive(), gateway.log_text()[-3000:]
        assert gateway.stop() == 0, gateway.log_text()[-3000:]


def test_gateway_serve_refuses_a_fallback_at_start_naming_the_extra(installed: Installed) -> None:
    config = REPO_ROOT / "config" / "local.yaml"
    result = _run([installed.gateway, "serve", "--config", config], installed.root, 60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "models.digits.fallback.model: 'digits-logreg': a fallback needs onnxruntime" in (
        result.stderr
    )
    assert "pip install 'v2-gateway[cpu]'" in result.stderr
