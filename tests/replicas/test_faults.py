from __future__ import annotations

import asyncio
import random
from typing import Any

import numpy as np
import pytest

from replicas.errors import BadRequest, InjectedFault
from replicas.faults import CRASH_EXIT_CODE, FaultInjector, Faults, NoFaults, corrupt


class FakeSleep:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def injector(seed: int = 0, **kwargs: Any) -> tuple[FaultInjector, FakeSleep]:
    sleep = FakeSleep()
    return FaultInjector(random.Random(seed), sleep=sleep, **kwargs), sleep


def digits_outputs(rows: int = 50, seed: int = 1) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    probabilities = rng.dirichlet(np.ones(10), size=rows).astype(np.float32)
    return {"label": probabilities.argmax(axis=1).astype(np.int64), "probabilities": probabilities}


# ----------------------------------------------------------------------------- validation


def test_defaults_are_healthy() -> None:
    faults = Faults()
    assert faults.to_json() == {
        "latency_ms": 0.0,
        "error_rate": 0.0,
        "hang": False,
        "corrupt_rate": 0.0,
        "ready": True,
        "poison_value": None,
        "wrong_id": False,
    }
    assert not any(faults.active().values())


def test_updates_merge() -> None:
    faults, crash = Faults().merged({"latency_ms": 50})
    faults, crash = faults.merged({"error_rate": 0.5, "ready": False})
    assert (faults.latency_ms, faults.error_rate, faults.ready, crash) == (50.0, 0.5, False, False)
    assert faults.active() == {
        "latency_ms": True,
        "error_rate": True,
        "hang": False,
        "corrupt_rate": False,
        "ready": True,
        "poison_value": False,
        "wrong_id": False,
    }


def test_crash_is_a_command_not_a_state() -> None:
    faults, crash = Faults().merged({"crash": True, "latency_ms": 5})
    assert crash and "crash" not in faults.to_json()


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        ([1], "must be a JSON object"),
        ({"latency_ms": -1}, "'latency_ms' must be between 0 and 3.6e+06"),
        ({"latency_ms": "10"}, "'latency_ms' must be a number"),
        ({"latency_ms": True}, "'latency_ms' must be a number"),
        ({"error_rate": 1.5}, "'error_rate' must be between 0 and 1"),
        ({"corrupt_rate": -0.1}, "'corrupt_rate' must be between 0 and 1"),
        ({"hang": 1}, "'hang' must be true or false"),
        ({"ready": "no"}, "'ready' must be true or false"),
        ({"crash": "yes"}, "'crash' must be true or false"),
        ({"slow": True}, "unknown fault 'slow'"),
        ({"poison_value": "13"}, "'poison_value' must be a number"),
    ],
)
def test_bad_updates_name_the_field(update: Any, expected: str) -> None:
    with pytest.raises(BadRequest, match=expected.replace("(", r"\(").replace("+", r"\+")):
        Faults().merged(update)


def test_bad_update_leaves_faults_unchanged() -> None:
    inj, _ = injector()
    inj.update({"latency_ms": 10})
    with pytest.raises(BadRequest):
        inj.update({"latency_ms": 20, "error_rate": 2})
    assert inj.faults.latency_ms == 10


# ----------------------------------------------------------------------------- behaviour


async def test_latency_sleeps_before_answering() -> None:
    inj, sleep = injector()
    await inj.before_infer()
    assert sleep.calls == []
    inj.update({"latency_ms": 250})
    await inj.before_infer()
    assert sleep.calls == [0.25]


async def test_error_rate_is_seeded() -> None:
    async def pattern(seed: int) -> list[bool]:
        inj, _ = injector(seed)
        inj.update({"error_rate": 0.5})
        failed = []
        for _ in range(40):
            try:
                await inj.before_infer()
                failed.append(False)
            except InjectedFault as exc:
                assert exc.status == 500 and exc.message == "injected fault"
                failed.append(True)
        return failed

    first = await pattern(7)
    assert first == await pattern(7)
    assert 5 < sum(first) < 35


async def test_a_poison_value_fails_only_the_requests_holding_it() -> None:
    inj, _ = injector()
    inj.update({"poison_value": 99.5})
    assert inj.faults.active()["poison_value"]
    good = {"input": np.array([[0.0, 1.0, 16.0]], dtype=np.float32)}
    poison = {"input": np.array([[0.0, 99.5, 16.0]], dtype=np.float32)}
    await inj.before_infer(good)
    await inj.before_infer()  # no inputs given: nothing to match
    with pytest.raises(InjectedFault, match=r"cannot take the value 99\.5") as info:
        await inj.before_infer(poison)
    assert info.value.status == 500
    inj.update({"poison_value": None})
    await inj.before_infer(poison)


async def test_error_rate_one_always_fails() -> None:
    inj, _ = injector()
    inj.update({"error_rate": 1})
    for _ in range(10):
        with pytest.raises(InjectedFault):
            await inj.before_infer()


async def test_hang_holds_requests_until_cleared() -> None:
    inj, _ = injector()
    inj.update({"hang": True})
    held = asyncio.create_task(inj.before_infer())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not held.done()
    inj.update({"latency_ms": 5})  # other updates keep the hang
    await asyncio.sleep(0)
    assert not held.done()
    inj.clear()
    await asyncio.wait_for(held, timeout=5)


async def test_crash_exits_with_the_crash_code() -> None:
    codes: list[int] = []
    exited = asyncio.Event()

    def fake_exit(code: int) -> None:
        codes.append(code)
        exited.set()

    inj, _ = injector(exit=fake_exit)
    inj.crash_soon()
    await asyncio.wait_for(exited.wait(), timeout=5)
    assert codes == [CRASH_EXIT_CODE]


def test_ready_fault() -> None:
    inj, _ = injector()
    assert inj.ready
    inj.update({"ready": False})
    assert not inj.ready
    assert inj.clear() == Faults() and inj.ready


def test_no_faults_is_inert() -> None:
    outputs = digits_outputs()
    null = NoFaults()
    assert null.ready and null.after_infer(outputs) is outputs
    asyncio.run(null.before_infer())


# ----------------------------------------------------------------------------- corruption


def test_corrupt_gives_a_wrong_but_consistent_answer() -> None:
    outputs = digits_outputs()
    bad = corrupt(outputs, random.Random(3))
    assert set(bad) == set(outputs)
    for name in outputs:
        assert bad[name].shape == outputs[name].shape and bad[name].dtype == outputs[name].dtype
    assert np.all(bad["label"] != outputs["label"])
    np.testing.assert_array_equal(bad["probabilities"].argmax(axis=1), bad["label"])
    np.testing.assert_allclose(bad["probabilities"].sum(axis=1), 1.0, rtol=1e-5)
    assert np.all((bad["label"] >= 0) & (bad["label"] < 10))


def test_corrupt_breaks_ties() -> None:
    outputs = {"label": np.array([0]), "probabilities": np.full((1, 4), 0.25, np.float32)}
    bad = corrupt(outputs, random.Random(0))
    assert bad["label"][0] != 0 and bad["probabilities"].argmax() == bad["label"][0]


def test_corrupt_without_scores_or_labels() -> None:
    labels_only = {"label": np.array([1, 2, 3])}
    assert np.all(corrupt(labels_only, random.Random(0))["label"] != labels_only["label"])
    other = {"embedding": np.ones((2, 3, 4), np.float32)}
    assert corrupt(other, random.Random(0))["embedding"] is other["embedding"]


def test_corrupt_rate_is_seeded() -> None:
    def corrupted(seed: int) -> list[bool]:
        inj, _ = injector(seed)
        inj.update({"corrupt_rate": 0.5})
        out = []
        for _ in range(40):
            outputs = digits_outputs(rows=1)
            out.append(bool(inj.after_infer(outputs)["label"][0] != outputs["label"][0]))
        return out

    assert corrupted(11) == corrupted(11)
    assert 5 < sum(corrupted(11)) < 35
