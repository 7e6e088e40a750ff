"""What the gRPC door hands the edge as headers (`gateway.grpc_door.infer.edge_headers`): only
the metadata the edge reads, and the gRPC deadline as the request's timeout."""

from __future__ import annotations

from gateway.grpc_door.infer import edge_headers


def test_only_the_metadata_the_edge_reads() -> None:
    metadata = (
        ("x-request-id", "r-1"),
        ("authorization", "Bearer k"),
        ("x-api-key", "k2"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("user-agent", "grpc-python"),
        ("x-other-bin", b"\x00\x01"),
    )
    headers = edge_headers(metadata, None)
    assert set(headers) == {"x-request-id", "authorization", "x-api-key", "traceparent"}
    assert "x-request-timeout-ms" not in headers


def test_the_deadline_is_the_timeout_and_the_tighter_of_two_wins() -> None:
    assert edge_headers((), 0.25) == {"x-request-timeout-ms": "250.000"}
    given = (("x-request-timeout-ms", "100"),)
    assert edge_headers(given, 0.25)["x-request-timeout-ms"] == "100.000"
    assert edge_headers(given, None)["x-request-timeout-ms"] == "100"
    assert edge_headers((), 0.0)["x-request-timeout-ms"] == "1.000"  # never 0 (a 400)


def test_a_bad_timeout_header_reaches_the_edge_as_sent() -> None:
    headers = edge_headers((("x-request-timeout-ms", "soon"),), 1.0)
    assert headers["x-request-timeout-ms"] == "soon"  # the edge answers it as REST's (400)
