"""A pool's extra request headers: checked at load, resolved once, sent on every request.

Why: a replica behind an ingress or an auth proxy (a KServe InferenceService) needs a ``Host``
to be routed by and often an ``Authorization``. Values may name environment variables as
``${NAME}`` so secrets stay out of the config file; the values are never shown (``/admin/state``
lists the names only) and never logged. Names the gateway or HTTP/1.1 framing owns are refused:
sending them twice, or a second framing, would corrupt the exchange.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import SecretStr

# Hop-by-hop (RFC 9110 7.6.1) and framing fields, and the ones the gateway writes itself.
REFUSED = {
    "connection": "hop-by-hop",
    "keep-alive": "hop-by-hop",
    "proxy-connection": "hop-by-hop",
    "te": "hop-by-hop",
    "trailer": "hop-by-hop",
    "upgrade": "hop-by-hop",
    "transfer-encoding": "framing, written by the gateway",
    "content-length": "framing, written by the gateway",
    "content-encoding": "the gateway sends bodies unencoded",
    "expect": "the gateway never waits for 100 Continue",
    "content-type": "written by the gateway (JSON or binary tensors)",
    "inference-header-content-length": "written by the gateway (binary tensors)",
    "traceparent": "written by the gateway (tracing)",
    "tracestate": "written by the gateway (tracing)",
}
# RFC 9110 field-name
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# printable ASCII, trimmed
_VALUE = re.compile(r"^[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?$")
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def check_headers(headers: Mapping[str, SecretStr]) -> dict[str, SecretStr]:
    """The headers with lower-case names; ValueError naming the first bad one (never a value)."""
    checked: dict[str, SecretStr] = {}
    for name, value in headers.items():
        key = name.lower()
        if not _TOKEN.match(name):
            raise ValueError(f"header name {name!r} is not an HTTP field name")
        if key in REFUSED:
            raise ValueError(f"header {name!r} cannot be set per pool ({REFUSED[key]})")
        if key in checked:
            raise ValueError(f"header {name!r} is given twice (names ignore case)")
        template = value.get_secret_value()
        if not _VALUE.match(_REFERENCE.sub("x", template)):
            raise ValueError(
                f"header {name!r}: the value must be printable ASCII without leading or "
                "trailing spaces (no CR, LF or other control characters)"
            )
        checked[key] = value
    return checked


def missing_variables(headers: Mapping[str, SecretStr], environ: Mapping[str, str]) -> list[str]:
    """``name (VAR)`` for every ``${VAR}`` that ``environ`` lacks."""
    return [
        f"{name} (${{{var}}})"
        for name, value in headers.items()
        for var in _REFERENCE.findall(value.get_secret_value())
        if var not in environ
    ]


@dataclass(frozen=True, slots=True)
class ExtraHeaders:
    """The resolved headers as the transport writes them: ``host`` (None: the URL's authority)
    and the other fields as ready ``name: value\\r\\n`` lines. Its repr shows names only."""

    host: str | None = None
    lines: str = ""
    count: int = 0
    names: tuple[str, ...] = ()

    @classmethod
    def resolve(cls, headers: Mapping[str, SecretStr], environ: Mapping[str, str]) -> ExtraHeaders:
        """Substitutes ``${VAR}`` from ``environ``; ValueError names a missing variable."""
        values: dict[str, str] = {}
        for name, secret in headers.items():

            def lookup(match: re.Match[str], name: str = name) -> str:
                var = match.group(1)
                if var not in environ:
                    raise ValueError(f"header {name!r}: environment variable {var} is not set")
                return environ[var]

            value = _REFERENCE.sub(lookup, secret.get_secret_value())
            if not _VALUE.match(value):
                raise ValueError(
                    f"header {name!r}: the value from the environment must be printable ASCII "
                    "without leading or trailing spaces"
                )
            values[name.lower()] = value
        host = values.pop("host", None)
        lines = "".join(f"{name}: {value}\r\n" for name, value in values.items())
        return cls(host, lines, len(values), tuple(name.lower() for name in headers))

    def __repr__(self) -> str:
        return f"ExtraHeaders(names={self.names!r})"


NO_HEADERS = ExtraHeaders()
