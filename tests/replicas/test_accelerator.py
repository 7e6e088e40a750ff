"""The replica's accelerator on ``/metrics``: none without a device, injected readings under
dcgm-exporter's names, the temperature ramp, and NVML's real "no driver" path."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from replicas.accelerator import Accelerator
from replicas.accelerator_inject import INJECTED_SLOWDOWN_C, RANGES, InjectedReadings
from replicas.accelerator_nvml import open_device, start_accelerator
from replicas.errors import BadRequest
from replicas.fault_auth import FaultKey
from replicas.faults import FaultInjector
from replicas.server import ReplicaApp
from tests.support.blocked_imports import report, run_without
from tests.support.faults import FAULT_KEY, fault_headers
from v2proto.dcgm import FIELDS, NAMES


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def samples(text: str) -> dict[str, tuple[dict[str, str], float]]:
    return {
        s.name: (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def replica(model_path: Path, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    app = ReplicaApp(
        model_path,
        name="digits",
        faults=FaultInjector(random.Random(0)),
        fault_key=FaultKey(FAULT_KEY),
        accelerator=Accelerator("no GPU here", clock),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://r") as client:
        yield client
    await app.shutdown()


async def _inject(client: httpx.AsyncClient, body: object) -> httpx.Response:
    return await client.post("/admin/faults", json=body, headers=fault_headers())


async def test_without_a_device_nothing_is_made_up(replica: httpx.AsyncClient) -> None:
    seen = samples((await replica.get("/metrics")).text)
    assert seen["replica_accelerator_present"] == ({"source": "none"}, 0.0)
    assert not set(NAMES) & set(seen)


async def test_injected_readings_appear_under_dcgm_names(replica: httpx.AsyncClient) -> None:
    r = await _inject(replica, {"accelerator": {"temperature_c": 93, "ecc_dbe_total": 1}})
    assert r.status_code == 200 and r.json()["accelerator"]["temperature_c"] == 93
    seen = samples((await replica.get("/metrics")).text)
    labels, value = seen["DCGM_FI_DEV_GPU_TEMP"]
    assert value == 93.0 and set(labels) == {"gpu", "UUID"}
    assert seen["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"][1] == 1.0
    assert seen["DCGM_FI_DEV_SLOWDOWN_TEMP"][1] == INJECTED_SLOWDOWN_C
    assert seen["replica_accelerator_present"] == ({"source": "injected"}, 1.0)
    assert seen["replica_faults_active"][1] in (0.0, 1.0)


async def test_a_later_injection_keeps_earlier_readings_and_null_clears(
    replica: httpx.AsyncClient,
) -> None:
    await _inject(replica, {"accelerator": {"temperature_c": 70}})
    await _inject(replica, {"accelerator": {"power_w": 300}, "latency_ms": 1})
    state = (await replica.get("/admin/faults", headers=fault_headers())).json()
    assert state["accelerator"] == {"temperature_c": 70.0, "power_w": 300.0}
    assert state["latency_ms"] == 1.0
    await _inject(replica, {"accelerator": None})
    seen = samples((await replica.get("/metrics")).text)
    assert "DCGM_FI_DEV_GPU_TEMP" not in seen
    state = (await replica.get("/admin/faults", headers=fault_headers())).json()
    assert state["accelerator"] is None


async def test_delete_clears_injected_readings(replica: httpx.AsyncClient) -> None:
    await _inject(replica, {"accelerator": {"xid": 79}})
    await replica.delete("/admin/faults", headers=fault_headers())
    assert "DCGM_FI_DEV_XID_ERRORS" not in samples((await replica.get("/metrics")).text)


async def test_the_ramp_climbs_with_time(replica: httpx.AsyncClient, clock: Clock) -> None:
    ramp = {"from": 60, "to": 100, "over_s": 10}
    await _inject(replica, {"accelerator": {"temperature_ramp": ramp}})
    clock.now += 5
    assert samples((await replica.get("/metrics")).text)["DCGM_FI_DEV_GPU_TEMP"][1] == 80.0
    clock.now += 50
    assert samples((await replica.get("/metrics")).text)["DCGM_FI_DEV_GPU_TEMP"][1] == 100.0


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"accelerator": {"temperature_c": "hot"}}, "'accelerator.temperature_c' must be a number"),
        ({"accelerator": {"row_remap_pending": 2}}, "must be between 0 and 1"),
        ({"accelerator": {"fan": 1}}, "unknown accelerator reading 'fan'"),
        ({"accelerator": [1]}, "must be a JSON object of readings"),
        ({"accelerator": {"temperature_ramp": {"from": 1}}}, "with from, to and over_s"),
        ({"accelerator": {"temperature_c": 90}, "latency_ms": -1}, "'latency_ms' must be"),
    ],
)
async def test_bad_readings_are_a_400_that_changes_nothing(
    replica: httpx.AsyncClient, body: object, error: str
) -> None:
    r = await _inject(replica, body)
    assert r.status_code == 400 and error in r.json()["error"]
    state = (await replica.get("/admin/faults", headers=fault_headers())).json()
    assert state["accelerator"] is None and state["latency_ms"] == 0.0


async def test_a_scrape_can_ask_for_the_accelerator_series_only(
    replica: httpx.AsyncClient,
) -> None:
    await _inject(replica, {"accelerator": {"temperature_c": 50, "power_w": 100}})
    query = "&".join(f"name[]={n}" for n in NAMES)
    seen = samples((await replica.get(f"/metrics?{query}")).text)
    assert set(seen) == {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
        "DCGM_FI_DEV_SHUTDOWN_TEMP",
    }


def test_every_dcgm_field_can_be_injected() -> None:
    assert set(RANGES) == {f.attr for f in FIELDS}
    readings = InjectedReadings().merged({"temperature_c": 1}, 0.0)
    assert readings.apply(None, 0.0).temperature_c == 1.0


def test_a_fixed_temperature_ends_a_ramp() -> None:
    ramped = InjectedReadings().merged({"temperature_ramp": {"from": 1, "to": 2, "over_s": 1}}, 0)
    fixed = ramped.merged({"temperature_c": 50}, 0.0)
    assert fixed.ramp is None and fixed.apply(None, 9.0).temperature_c == 50.0
    with pytest.raises(BadRequest):
        fixed.merged({"uuid": "not-a-gpu"}, 0.0)


def test_nvml_without_a_driver_says_so() -> None:
    """pynvml is installed here but this machine has no NVIDIA driver: NVML's own words."""
    pytest.importorskip("pynvml")
    reason = open_device(0)
    if not isinstance(reason, str):
        reason.close()
        pytest.skip("this machine has an NVIDIA GPU: the no-driver path cannot be shown")
    assert reason.startswith("NVML: ")
    accelerator, sampler = start_accelerator(0, 0.5)
    assert sampler is None and accelerator.current() is None and accelerator.absent == reason


def test_without_the_gpu_extra_pynvml_is_never_needed() -> None:
    code = (
        "from replicas.accelerator_nvml import start_accelerator\n"
        "acc, sampler = start_accelerator(0, 0.5)\n"
        "print('RESULT', acc.absent, sampler)\n"
    )
    result = run_without(("pynvml",), code)
    assert "RESULT nvidia-ml-py is not installed (the 'gpu' extra) None" in result.stdout
    assert report(result)["loaded"] == []


class FakeNvmlError(Exception):
    pass


def fake_nvml(**overrides: object) -> object:
    """NVML's functions as pynvml names them, answering for one H200-like device; a function
    given as None raises NVML's NotSupported (the device lacks the field)."""
    import types

    def unsupported(*args: object) -> object:
        raise FakeNvmlError("Not Supported")

    calls: dict[str, object] = {
        "nvmlDeviceGetHandleByIndex": lambda i: f"handle-{i}",
        "nvmlDeviceGetUUID": lambda h: b"GPU-abc",
        "nvmlDeviceGetTemperatureThreshold": lambda h, kind: {0: 95, 1: 90}[kind],
        "nvmlEventSetCreate": unsupported,
        "nvmlDeviceGetPowerUsage": lambda h: 312_500,  # mW
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: {0: 7, 1: 0}[kind],
        "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x20,
        "nvmlDeviceGetRemappedRows": lambda h: (3, 0, 1, 0),
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(used=2 * 1024**3, free=1024**3),
        "nvmlDeviceGetTemperature": lambda h, sensor: 61,
        "nvmlShutdown": lambda: None,
    }
    calls.update({k: (unsupported if v is None else v) for k, v in overrides.items()})
    return types.SimpleNamespace(
        NVMLError=FakeNvmlError,
        NVML_TEMPERATURE_THRESHOLD_SHUTDOWN=0,
        NVML_TEMPERATURE_THRESHOLD_SLOWDOWN=1,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_TEMPERATURE_GPU=0,
        nvmlEventTypeXidCriticalError=8,
        **calls,
    )


def test_nvml_readings_in_dcgm_units() -> None:
    from replicas.accelerator_nvml import NvmlDevice

    reading = NvmlDevice(fake_nvml(), 0).read()  # type: ignore[arg-type]
    assert (reading.gpu, reading.uuid, reading.temperature_c) == ("0", "GPU-abc", 61.0)
    assert (reading.power_w, reading.ecc_sbe_total, reading.ecc_dbe_total) == (312.5, 7.0, 0.0)
    assert (reading.row_remap_pending, reading.row_remap_failure) == (1.0, 0.0)
    assert (reading.fb_used_mib, reading.fb_free_mib) == (2048.0, 1024.0)
    assert (reading.slowdown_c, reading.shutdown_c, reading.throttle_reasons) == (90, 95, 32)
    assert reading.xid is None  # no event set: unknown, not 0


def test_fields_the_device_lacks_are_left_out() -> None:
    from replicas.accelerator_nvml import NvmlDevice

    nvml = fake_nvml(nvmlDeviceGetTotalEccErrors=None, nvmlDeviceGetRemappedRows=None)
    reading = NvmlDevice(nvml, 0).read()  # type: ignore[arg-type]
    assert reading.ecc_dbe_total is None and reading.row_remap_pending is None
    assert reading.temperature_c == 61.0
