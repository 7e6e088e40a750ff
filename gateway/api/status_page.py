"""``GET /status``: the gateway's state as an HTML page for people (refreshes itself).

The same facts as ``/admin/state`` and ``/slo``, laid out for a glance during an incident:
models and whether they can answer, each replica's health, breaker, ejection and quarantine,
the fallback's verification, and every SLO's budget and alerts.
"""

from __future__ import annotations

from html import escape
from typing import Any

REFRESH_S = 2

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}.bad{background:#fdd}.warn{background:#ffe9b3}.ok{background:#e5f6e5}
"""


def render_status(state: dict[str, Any], slo: dict[str, Any]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<meta http-equiv='refresh' content='{REFRESH_S}'><title>v2-gateway status</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>v2-gateway: {'ready' if state['ready'] else 'NOT READY'}</h1>",
        _models(state),
        *(_pool(pool) for pool in state["pools"]),
        _fallbacks(state),
        _slos(slo),
        _store(state),
        "</body></html>",
    ]
    return "".join(parts)


def _table(headers: list[str], rows: list[tuple[str, list[Any]]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        f"<tr class='{css}'>" + "".join(f"<td>{escape(str(v))}</td>" for v in cells) + "</tr>"
        for css, cells in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _models(state: dict[str, Any]) -> str:
    rows = [
        (
            "ok" if m["ready"] else "bad",
            [
                name,
                m["route"],
                ", ".join(m["pools"]),
                m["ready"],
                f"{m['in_flight']}/{m['max_in_flight']}",
                m["shed"],
                m["policy"]["reason"] or "normal",
            ],
        )
        for name, m in state["models"].items()
    ]
    headers = ["model", "route", "pools", "ready", "in flight", "shed", "policy"]
    return "<h2>Models</h2>" + _table(headers, rows)


def _replica_css(replica: dict[str, Any]) -> str:
    if replica["quarantined"] or replica["healthy"] is False:
        return "bad"
    breaker = (replica.get("breaker") or {}).get("state", "closed")
    return "warn" if replica["ejected"] or breaker != "closed" else "ok"


def _pool(pool: dict[str, Any]) -> str:
    rows = [
        (
            _replica_css(r),
            [
                r["id"],
                r["url"],
                r["healthy"],
                (r.get("breaker") or {}).get("state"),
                f"{r['ejected_for_s']} s" if r["ejected"] else "",
                r["quarantine_reason"] if r["quarantined"] else "",
                r["outstanding"],
                r["ewma_latency_ms"],
                r["requests"],
                r["failures"],
                r["last_error"] or "",
            ],
        )
        for r in pool["replicas"]
    ]
    title = f"Pool {pool['name']} ({pool['model']}): {pool['healthy']}/{pool['size']} healthy"
    if pool["panic"]:
        title += ", PANIC"
    headers = [
        "replica",
        "url",
        "healthy",
        "breaker",
        "ejected",
        "quarantined",
        "outstanding",
        "ewma ms",
        "requests",
        "failures",
        "last error",
    ]
    return f"<h2>{escape(title)}</h2>" + _table(headers, rows)


def _fallbacks(state: dict[str, Any]) -> str:
    if not state["fallbacks"]:
        return ""
    rows = [
        ("ok" if f["ok"] else "bad", [name, f["ok"], f["reason"]])
        for name, f in state["fallbacks"].items()
    ]
    return "<h2>Fallbacks</h2>" + _table(["model", "verified", "status"], rows)


def _slos(slo: dict[str, Any]) -> str:
    rows = []
    for model, entry in slo.get("models", {}).items():
        for item in entry.get("slos", []):
            firing = [a["name"] for a in item["alerts"] if a["firing"]]
            remaining = item["error_budget"]["remaining"]
            css = "bad" if firing else ("warn" if remaining < 0.5 else "ok")
            burns = ", ".join(f"{w} {b:g}×" for w, b in item["burn_rates"].items())
            rows.append(
                (
                    css,
                    [
                        model,
                        item["name"],
                        item["objective"],
                        item["sli"],
                        f"{remaining:.1%}",
                        burns,
                        ", ".join(firing),
                    ],
                )
            )
    if not rows:
        return ""
    headers = ["model", "slo", "objective", "sli", "budget left", "burn rates", "alerts firing"]
    return "<h2>SLOs</h2>" + _table(headers, rows)


def _store(state: dict[str, Any]) -> str:
    store = state["state_store"]
    css = "bad" if store.get("degraded") else "ok"
    return "<h2>Shared state</h2>" + _table(
        ["backend", "instance", "degraded"],
        [(css, [store["backend"], store["instance"], store.get("degraded", False)])],
    )
