"""The protocol package's errors; each side maps them to its own tree where they enter.

A client's malformed request is the gateway's or the replica's 400, a replica's malformed reply
is the gateway's upstream error, so this package only says *what* is wrong, never a status.

    ProtocolError    a V2 message breaks the protocol: the message names the field
    ManifestError    a manifest or golden set is malformed, or a file does not match its entry
"""

from __future__ import annotations


class ProtocolError(Exception):
    """A V2 request or response body that does not follow the protocol (or the signature)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ManifestError(ValueError):
    """A manifest or golden set is malformed, or a file does not match its manifest entry."""
