"""Certificates made in the test (trustme): a CA, a server certificate for loopback, a client
certificate for mutual TLS, and a second CA that trusts none of them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import trustme


@dataclass(frozen=True, slots=True)
class Certificates:
    ca: Path  # signs everything below
    server_cert: Path  # for 127.0.0.1 and localhost
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here: trusting it alone must fail

    @classmethod
    def make(cls, directory: Path) -> Certificates:
        ca, other = trustme.CA(), trustme.CA()
        server = ca.issue_cert("127.0.0.1", "localhost")
        client = ca.issue_cert("gateway-client.test")
        paths = cls(*(directory / f"{f.name}.pem" for f in fields(cls)))
        ca.cert_pem.write_to_path(str(paths.ca))
        other.cert_pem.write_to_path(str(paths.other_ca))
        server.cert_chain_pems[0].write_to_path(str(paths.server_cert))
        server.private_key_pem.write_to_path(str(paths.server_key))
        client.cert_chain_pems[0].write_to_path(str(paths.client_cert))
        client.private_key_pem.write_to_path(str(paths.client_key))
        return paths
