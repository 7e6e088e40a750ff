"""The Dockerfiles, checked without a container runtime: what they COPY exists in the repository
and survives the .dockerignore, stages and extras are the ones intended, and the final images
run as non-root with a HEALTHCHECK on the V2 liveness route."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.deploy.manifests import DOCKER, ROOT, Stage, copies, dockerfiles, exec_form, stages

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = set(PYPROJECT["project"]["optional-dependencies"])
FILES = {p.name: p for p in dockerfiles()}
EXPECTED = {"Dockerfile.gateway", "Dockerfile.replica", "Dockerfile.replica-gpu"}


def test_the_three_images_are_there() -> None:
    assert set(FILES) == EXPECTED


def _tracked(path: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--", path], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout.split()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_copied_path_exists_in_the_repository(name: str) -> None:
    """A COPY from the build context names a path that a fresh clone has (tracked, not just
    present here: models/ is built locally and ignored by git, so it must come from a stage)."""
    for stage in stages(FILES[name]):
        for copy in copies(stage):
            if copy.stage is not None:
                continue
            for source in copy.sources:
                assert (ROOT / source).exists(), f"{name}: COPY {source}: no such path"
                assert _tracked(source), f"{name}: COPY {source}: not tracked by git"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_copies_between_stages_name_an_earlier_stage_that_makes_the_path(name: str) -> None:
    seen: dict[str, Stage] = {}
    for stage in stages(FILES[name]):
        for copy in copies(stage):
            if copy.stage is None:
                continue
            assert copy.stage in seen, f"{name}: COPY --from={copy.stage}: no earlier stage"
            made = " ".join(rest for _, rest in seen[copy.stage].instructions)
            for source in copy.sources:
                assert source in made or source.rsplit("/", 1)[0] in made, (
                    f"{name}: stage {copy.stage} never makes {source}"
                )
        if stage.name:
            seen[stage.name] = stage


def _ignored(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern that matches the path (or a parent of it) decides."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(p, body) for p in prefixes):
            ignored = not negate
    return ignored


def _ignore_patterns(dockerfile: Path) -> list[str]:
    text = dockerfile.with_name(dockerfile.name + ".dockerignore").read_text(encoding="utf-8")
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_dockerignore_keeps_every_copied_path_and_drops_the_rest(name: str) -> None:
    patterns = _ignore_patterns(FILES[name])
    for stage in stages(FILES[name]):
        for copy in copies(stage):
            for source in copy.sources if copy.stage is None else ():
                assert not _ignored(patterns, source), f"{name}: .dockerignore drops {source}"
                for tracked in _tracked(source)[:50]:
                    if "__pycache__" not in tracked:
                        assert not _ignored(patterns, tracked), f"drops {tracked}"
    for local in (".venv", "models", ".git", "tests", "loadtests", ".peers"):
        assert _ignored(patterns, local), f"{name}: the build context would carry {local}/"


def test_the_dockerignore_files_are_one_text() -> None:
    texts = {(DOCKER / f"{n}.dockerignore").read_text(encoding="utf-8") for n in EXPECTED}
    assert len(texts) == 1


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_base_images_are_pinned_by_tag(name: str) -> None:
    for stage in stages(FILES[name]):
        _, _, tag = stage.base.partition(":")
        assert tag and tag != "latest", f"{name}: FROM {stage.base} is not pinned"
        assert re.search(r"\d", tag), f"{name}: FROM {stage.base}: a version tag, please"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_final_image_is_non_root_with_a_liveness_healthcheck(name: str) -> None:
    final = stages(FILES[name])[-1]
    keywords = dict(final.instructions)  # the last of each instruction wins, as in Docker
    user = keywords["USER"].split(":")[0]
    assert user.isdigit() and int(user) >= 10000, "a numeric uid (runAsNonRoot can check it)"
    port = keywords["EXPOSE"].split("/")[0]
    check = keywords["HEALTHCHECK"]
    assert f"127.0.0.1:{port}/v2/health/live" in check
    assert "HEALTHCHECK NONE" not in check


def _pip_installs(stage: Stage) -> list[set[str]]:
    """The extras of every `pip install ".[...]"` in a stage."""
    found = []
    for keyword, rest in stage.instructions:
        if keyword == "RUN":
            for extras in re.findall(r'pip install "\.\[([a-z,]+)\]"', rest):
                found.append(set(extras.split(",")))
    return found


@pytest.mark.parametrize(
    ("name", "runtime_extra"),
    [
        ("Dockerfile.gateway", "cpu"),
        ("Dockerfile.replica", "replica"),
        ("Dockerfile.replica-gpu", "gpu"),
    ],
)
def test_the_runtime_venv_has_one_onnxruntime_and_no_build_dev_or_load_extra(
    name: str, runtime_extra: str
) -> None:
    """The final stage's venv comes from a stage that installs only the runtime extra; the
    model build's extra (scikit-learn, skl2onnx) stays in the stage that builds the models."""
    all_stages = stages(FILES[name])
    final = all_stages[-1]
    assert not _pip_installs(final), "the final stage installs nothing with pip"
    by_name = {s.name: s for s in all_stages if s.name}
    venv_from = {c.stage for c in copies(final) if c.dest == "/opt/venv"}
    (venv_stage,) = venv_from
    assert venv_stage is not None
    assert _pip_installs(by_name[venv_stage]) == [{runtime_extra}]
    for stage in all_stages:
        for extras in _pip_installs(stage):
            assert extras <= EXTRAS, f"{name}: unknown extra {extras - EXTRAS}"
            assert not extras & {"dev", "load"}, f"{name}: installs {extras & {'dev', 'load'}}"


def test_the_replica_images_build_their_models_and_the_gpu_one_serves_on_cuda() -> None:
    for name in ("Dockerfile.replica", "Dockerfile.replica-gpu"):
        all_stages = stages(FILES[name])
        by_name = {s.name: s for s in all_stages if s.name}
        (models,) = [c for c in copies(all_stages[-1]) if c.dest == "/models"]
        assert models.stage is not None
        runs = " ".join(r for k, r in by_name[models.stage].instructions if k == "RUN")
        assert "replica build-models --out " + models.sources[0] in runs
        entrypoint = exec_form(dict(all_stages[-1].instructions)["ENTRYPOINT"])
        assert entrypoint[:2] == ["replica", "serve"]
        assert ("--device" in entrypoint) == (name == "Dockerfile.replica-gpu")
        if "--device" in entrypoint:
            assert entrypoint[entrypoint.index("--device") + 1] == "cuda"
            assert all_stages[-1].base.startswith("nvidia/cuda:")


def test_the_gateway_image_carries_the_fallback_and_verifies_it_at_build_time() -> None:
    all_stages = stages(FILES["Dockerfile.gateway"])
    final = dict(all_stages[-1].instructions)
    assert final["WORKDIR"] == "/app"  # relative config paths (fallback_models/...) resolve here
    assert any(c.dest == "./fallback_models" for c in copies(all_stages[-1]))
    runs = " ".join(r for s in all_stages for k, r in s.instructions if k == "RUN")
    assert "verify_fallback.py fallback_models/MANIFEST.json" in runs


def test_the_build_time_fallback_check_passes_on_the_repository(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("verify_fallback", DOCKER / "verify_fallback.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.chdir(ROOT)
    assert module.main(["fallback_models/MANIFEST.json"]) == 0
    assert "digits-logreg: ok" in capsys.readouterr().out
