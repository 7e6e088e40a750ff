"""Reading Prometheus text into one device's `Reading`: a replica's page, a dcgm-exporter
node page by UUID, and parsing again only what changed."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.upstream.probes import accelerator_readings
from gateway.upstream.probes.accelerator_readings import ReadingParser

UUID_A = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
UUID_B = "GPU-11111111-2222-3333-4444-555555555555"


def exporter_page(temp_a: float, temp_b: float) -> bytes:
    """As dcgm-exporter writes it: HELP and TYPE lines, more labels, two GPUs, other fields."""
    lines = []
    for name, kind, a, b in (
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", 1980, 1980),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", temp_a, temp_b),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", 0, 3),
        ("DCGM_FI_DEV_FB_USED", "gauge", 1024, 2048),
    ):
        lines += [f"# HELP {name} help.", f"# TYPE {name} {kind}"]
        for gpu, uuid, value in (("0", UUID_A, a), ("1", UUID_B, b)):
            lines.append(f'{name}{{gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",'
                         f'modelName="NVIDIA H200",Hostname="node-1"}} {value}')  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


def test_a_node_page_is_read_for_the_replicas_gpu_only() -> None:
    reading = ReadingParser(UUID_B).read(exporter_page(50, 61))
    assert reading is not None
    assert (reading.gpu, reading.uuid, reading.temperature_c) == ("1", UUID_B, 61.0)
    assert (reading.ecc_dbe_total, reading.fb_used_mib) == (3.0, 2048.0)
    assert reading.power_w is None  # not on the page: not made up


def test_without_a_uuid_the_first_device_is_taken() -> None:
    reading = ReadingParser().read(exporter_page(50, 61))
    assert reading is not None and reading.uuid == UUID_A and reading.temperature_c == 50.0


def test_a_page_without_the_device_reads_as_none() -> None:
    assert ReadingParser("GPU-absent").read(exporter_page(50, 61)) is None
    assert ReadingParser().read(b'replica_accelerator_present{source="none"} 0.0\n') is None


def test_only_lines_that_changed_are_parsed_again() -> None:
    parser = ReadingParser(UUID_A)
    parser.read(exporter_page(50, 61))
    first = parser.parsed
    assert parser.read(exporter_page(50, 61)) is not None and parser.parsed == first  # same page
    reading = parser.read(exporter_page(51, 61))
    assert parser.parsed == first + 1  # the one line that moved
    assert reading is not None and reading.temperature_c == 51.0 and reading.ecc_dbe_total == 0


def test_a_malformed_line_is_skipped() -> None:
    page = exporter_page(50, 61) + b'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="' + UUID_A.encode()
    reading = ReadingParser(UUID_A).read(page + b'"} not-a-number\n')
    assert reading is not None and reading.power_w is None and reading.temperature_c == 50.0


def test_a_known_series_has_its_value_parsed_again_and_nothing_else() -> None:
    parser = ReadingParser(UUID_A)
    parser.read(exporter_page(50, 61))
    assert parser.values_parsed == 0  # the first page: every line parsed whole
    reading = parser.read(exporter_page(52.5, 61))
    assert parser.values_parsed == 1 and reading is not None and reading.temperature_c == 52.5
    assert (reading.gpu, reading.uuid) == ("0", UUID_A)


def test_a_known_series_with_a_bad_value_is_skipped_and_the_rest_counts() -> None:
    parser = ReadingParser(UUID_A)
    parser.read(exporter_page(50, 61))
    page = exporter_page(50, 61).replace(b'Hostname="node-1"} 50', b'Hostname="node-1"} fifty')
    reading = parser.read(page)
    assert reading is not None and reading.temperature_c is None and reading.ecc_dbe_total == 0


@settings(max_examples=150, deadline=None)
@given(
    pages=st.lists(
        st.tuples(
            st.one_of(
                st.integers(-300, 300).map(str),
                st.floats(-1e6, 1e6, allow_nan=False).map(repr),
                st.text("0123456789.eE+-_ \tnaIifNty", max_size=9),  # well formed or not
            ),
            st.sampled_from(["", " 1700000000000", "\t1700000000123"]),  # timestamps
            st.sampled_from(["node-1", "no}de", 'a\\"}b', "x,y=\\n"]),  # label values
        ),
        min_size=1,
        max_size=6,
    )
)
def test_reading_again_agrees_with_reading_afresh(pages: list[tuple[str, str, str]]) -> None:
    """Differential: a parser that has seen earlier pages (values read by the sample reader
    alone) reads each page as a new parser (every line parsed whole) does, values that are
    not numbers included."""
    seen = ReadingParser(UUID_A)
    for value, stamp, host in pages:
        text = "".join(
            f'{name}{{gpu="0",UUID="{UUID_A}",Hostname="{host}"}} {v}{stamp}\n'
            for name, v in (("DCGM_FI_DEV_GPU_TEMP", value), ("DCGM_FI_DEV_POWER_USAGE", "300"))
        ).encode()
        assert seen.read(text) == ReadingParser(UUID_A).read(text)


@pytest.mark.parametrize("reader", ["the sample reader", "the whole parser"])
@pytest.mark.parametrize(
    ("rest", "value"),
    [
        (" 61", 61.0),
        (" 6.5e1 1700000000000", 65.0),
        ("\t-2", -2.0),
        (" NaN", None),
        (" +Inf", math.inf),
        (" 1_0", "bad"),
        (" sixty", "bad"),
        ("", "bad"),
    ],
)
def test_a_value_reads_the_same_with_or_without_the_parsers_sample_reader(
    monkeypatch: pytest.MonkeyPatch, reader: str, rest: str, value: float | str | None
) -> None:
    if reader == "the whole parser":
        # as with a prometheus_client release without `_parse_sample`
        monkeypatch.setattr(accelerator_readings, "_SAMPLE_READER", None)
    if value == "bad":
        with pytest.raises(ValueError):
            accelerator_readings.read_value(rest)
    elif value is None:
        assert math.isnan(accelerator_readings.read_value(rest))
    else:
        assert accelerator_readings.read_value(rest) == value
