"""The client ``SSLContext`` for a pool's TLS settings, and the one message for TLS failures.

Why a module of its own: the transport builds one context per settings and reuses it for every
connection (building one reads the CA bundle and costs milliseconds); this file holds what
such a context must be (HTTP/1.1 only, verification on unless turned off) in one place to
audit.
"""

from __future__ import annotations

import ssl

from gateway.config.tls import TlsConfig
from gateway.errors import UpstreamConnectError


def client_context(tls: TlsConfig) -> ssl.SSLContext:
    """A client context for ``tls``; `UpstreamConnectError` naming the file if one is unusable."""
    try:
        context = ssl.create_default_context(cafile=tls.ca_file if tls.verify else None)
        if tls.cert_file is not None:
            context.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        # a missing file, a bad PEM, a key that does not match
        files = ", ".join(f for f in (tls.ca_file, tls.cert_file, tls.key_file) if f)
        raise UpstreamConnectError(f"cannot load the TLS files ({files}): {exc}") from exc
    if not tls.verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    # the connection parses HTTP/1.1 only
    context.set_alpn_protocols(["http/1.1"])
    return context


def handshake_error(exc: ssl.SSLError) -> UpstreamConnectError:
    """A failed handshake (a certificate not trusted, a name that does not match, a client
    certificate refused) as the connect error it is for the retry and breaker layers; the
    replica's address is left out (a client may read it; the attempt names the replica)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = f"certificate verify failed: {exc.verify_message}"
    else:
        reason = exc.reason or str(exc)
    return UpstreamConnectError(f"TLS handshake failed: {reason}")
