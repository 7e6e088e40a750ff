"""Load pages: each server's names read into a reading (the table), within caps, as data."""

from __future__ import annotations

import pytest

from gateway.upstream.probes.accelerator_pages import PageCaps
from gateway.upstream.probes.load_names import LOAD_METRICS, QUERY
from gateway.upstream.probes.load_pages import (
    MAX_LOAD_LINES,
    LoadTracker,
    PageTotals,
    read_load_page,
)

CAPS = PageCaps(1 << 20, 10_000)
OURS = b"""# HELP replica_requests_in_flight Infer requests received and not yet answered.
# TYPE replica_requests_in_flight gauge
replica_requests_in_flight{model="digits",version="1"} 7.0
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="digits",version="1"} 6.0
nv_inference_pending_request_count{model="other",version="1"} 40.0
replica_ready{model="digits",version="1"} 1.0
"""


def mlserver(queue_sum: float, count: float) -> bytes:
    return (
        "# TYPE parallel_request_queue histogram\n"
        f'parallel_request_queue_bucket{{le="+Inf"}} {count}\n'
        f"parallel_request_queue_count {count}\n"
        f"parallel_request_queue_sum {queue_sum}\n"
        "parallel_request_queue_created 1.7e9\n"
    ).encode()


def kserve(seconds: float, count: float) -> bytes:
    return (
        "# TYPE request_predict_seconds histogram\n"
        f'request_predict_seconds_count{{model_name="digits"}} {count}\n'
        f'request_predict_seconds_sum{{model_name="digits"}} {seconds}\n'
        f'request_predict_seconds_sum{{model_name="other"}} 999.0\n'
    ).encode()


def test_triton_names_our_replica_and_the_model_label_filter() -> None:
    totals = read_load_page(OURS, CAPS, "digits")
    assert totals == PageTotals({"replica_requests_in_flight": 7.0,
                                 "nv_inference_pending_request_count": 6.0})  # fmt: skip
    report = LoadTracker().reading(10.0, totals)
    assert report is not None and (report.queue, report.inflight) == (6.0, 7.0)
    assert report.source == "scrape"


def test_mlserver_queue_is_the_mean_seen_since_the_previous_scrape() -> None:
    tracker = LoadTracker()
    assert tracker.reading(1.0, read_load_page(mlserver(10, 10), CAPS, "digits")) is None
    second = tracker.reading(2.0, read_load_page(mlserver(10 + 40 * 8, 18), CAPS, "digits"))
    assert second is not None and second.queue == 40.0  # 8 arrivals saw 40 waiting each
    idle = tracker.reading(3.0, read_load_page(mlserver(330, 18), CAPS, "digits"))
    assert idle is not None and idle.queue == 0.0  # nobody arrived: nobody waited
    restarted = tracker.reading(4.0, read_load_page(mlserver(1, 1), CAPS, "digits"))
    assert restarted is None  # a counter went back: unknown, not zero


def test_kserve_busy_is_predict_seconds_per_second() -> None:
    tracker = LoadTracker()
    assert tracker.reading(10.0, read_load_page(kserve(5.0, 10), CAPS, "digits")) is None
    report = tracker.reading(12.0, read_load_page(kserve(9.0, 30), CAPS, "digits"))
    assert report is not None and report.queue == 2.0 and report.inflight == 2.0


def test_a_page_without_load_families_is_empty() -> None:
    totals = read_load_page(b'replica_ready{model="digits"} 1\nup 1\n', CAPS, "digits")
    assert totals.empty and totals.refused is None


@pytest.mark.parametrize(
    "page",
    [
        b'nv_inference_pending_request_count{model="digits"} -3\n',
        b'nv_inference_pending_request_count{model="digits"} NaN\n',
        b'nv_inference_pending_request_count{model="digits"} +Inf\n',
        b'nv_inference_pending_request_count{model="digits"} 1e308\n',
        b'nv_inference_pending_request_count{model="digits" 3\n',
        b"".join(
            b'nv_inference_pending_request_count{x="%d"} 1\n' % i for i in range(MAX_LOAD_LINES + 1)
        ),
        b"up 1\n" * 20_000,
    ],
)
def test_absurd_malformed_or_huge_pages_are_refused_whole(page: bytes) -> None:
    totals = read_load_page(page, CAPS, "digits")
    assert totals.refused is not None and totals.empty


def test_every_row_of_the_table_is_asked_for_by_name() -> None:
    assert all(f"name[]={m.name}" in QUERY for m in LOAD_METRICS)
    assert {m.role for m in LOAD_METRICS} == {"queue", "inflight"}
