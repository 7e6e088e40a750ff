"""How the gateway speaks TLS to a pool's ``https://`` replicas: whom to trust, what to present.

It is a frozen value so an `Endpoint` can carry it and the transport can key its connection
pools and its one ``SSLContext`` per settings by it. The files are only checked to exist here
(so `check-config` and a reload name a missing one); they are read when the transport builds
the context (`gateway.upstream.transport.tls`).
"""

from __future__ import annotations

import os

from pydantic import Field, model_validator

from gateway.frozen import Frozen


class TlsConfig(Frozen):
    """``ca_file``: the CA bundle that signs the replicas' certificates (default: the system's).
    ``cert_file`` (+ ``key_file`` unless the key is in the same PEM): the client certificate
    presented for mutual TLS. ``server_name``: the name sent as SNI and checked against the
    certificate (default: the URL's host). ``verify: false`` turns all checking off (a
    warning at every start); it is the only way to skip verification.
    """

    ca_file: str | None = Field(
        None,
        min_length=1,
        description="CA bundle of the replicas' certificates; default: the system's",
    )
    cert_file: str | None = Field(
        None, min_length=1, description="client certificate for mutual TLS (PEM)"
    )
    key_file: str | None = Field(
        None, min_length=1, description="its key, unless in the same PEM as the certificate"
    )
    server_name: str | None = Field(
        None,
        min_length=1,
        pattern=r"^[A-Za-z0-9.:_-]+$",
        description="the name sent as SNI and checked; default: the URL's host",
    )
    verify: bool = Field(True, description="false skips every check (warned at each start)")

    @model_validator(mode="after")
    def _pairs(self) -> TlsConfig:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("tls.key_file needs tls.cert_file (the client certificate)")
        for key in ("ca_file", "cert_file", "key_file"):
            path = getattr(self, key)
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"tls.{key}: no such file: {path}")
        return self

    def snapshot(self) -> dict[str, object]:
        """For ``/admin/state``: paths and switches only, never a file's contents."""
        return self.model_dump()


DEFAULT_TLS = TlsConfig()
