"""Secrets and forged text kept out of everything the gateway shows: masked URLs, escaped text.

Every place that displays or logs a URL that may carry credentials (the Redis URL in
``/admin/state``, ``/slo``, ``/status``, log lines and error messages; a refused replica URL in
a config error) passes it through `mask_url` first, so there is one rule to audit. Text a
replica wrote (its error messages) is passed through `printable` where it enters the gateway,
so a log line or view that quotes it shows one line of visible characters: no line break to
forge a log line with, no terminal escape, no bidirectional override.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, unquote_plus, urlencode, urlsplit, urlunsplit

MASK = "***"
# Query parameters that carry a secret (redis-py takes ``?password=``).
SECRET_PARAMS = frozenset({"password", "pass", "passwd", "pwd", "secret", "token", "key"})
# C0 and C1 controls, DEL, line and paragraph separators, bidirectional overrides and isolates
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with each control or bidirectional character written as an escape (``\\n``,
    ``\\x1b``, ``\\u202e``), so it stays one line that shows what it holds."""
    if _UNPRINTABLE.search(text) is None:
        return text
    return _UNPRINTABLE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def mask_url(url: str) -> str:
    """``url`` with the password of its userinfo and any secret query parameter masked.

    ``redis://:pw@h/0`` -> ``redis://:***@h/0``; ``redis://user:pw@h`` -> ``redis://user:***@h``;
    a userinfo without a colon (some clients read it as the password) is masked whole;
    ``?password=pw`` -> ``?password=***``. Something that does not parse is masked whole.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if colon else f"{MASK}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in SECRET_PARAMS for k, _ in pairs):
            masked = [(k, MASK if k.lower() in SECRET_PARAMS else v) for k, v in pairs]
            query = urlencode(masked, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets a URL carries (its password, secret query values), to scrub from text."""
    try:
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return ()
    found = [parts.password or ""]
    if parts.username and parts.password is None:
        # read as the password by some clients
        found.append(parts.username)
    found += [v for k, v in pairs if k.lower() in SECRET_PARAMS]
    raw = (item.partition("=") for item in parts.query.split("&"))
    # as written
    found += [v for k, _, v in raw if unquote_plus(k).lower() in SECRET_PARAMS]
    found += [unquote(s) for s in found]
    return tuple(sorted({s for s in found if s}, key=len, reverse=True))


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by the mask."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text
