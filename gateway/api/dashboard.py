"""``GET /status`` (and ``/dashboard``): the gateway's live dashboard, one self-contained page.

The page holds no state of its own: its script polls ``/admin/state``, ``/admin/history``,
``/admin/fleet`` and ``/slo`` every 2 s (same origin) and draws the fleet (every gateway of the
namespace, `gateway.api.dashboard_fleet`), replica tiles, charts of the last minutes (inline
SVG), the rollouts (`gateway.api.dashboard_rollouts`, from ``/admin/rollouts``), the SLO table
and the event timeline. The page is a list of sections (`SECTIONS`), the
replica tiles first after the fleet, so they are in view on opening; idle models are one line.
No external asset of any kind (no CDN, fonts or images), and a Content-Security-Policy that
allows none: it works on an air-gapped host and leaks nothing to third parties. A keyed
control plane: the data requests carry the key given in a ``#key=`` fragment or typed into the
page's form (kept in ``sessionStorage``); while it holds one, tiles and pools carry operator
buttons (`gateway.api.dashboard_controls`).
"""

from __future__ import annotations

from fastapi.responses import HTMLResponse

from gateway.api.dashboard_controls import CONTROLS_BAR, CONTROLS_SCRIPT, CONTROLS_STYLE
from gateway.api.dashboard_fleet import FLEET_SCRIPT, FLEET_SECTION, FLEET_STYLE
from gateway.api.dashboard_rollouts import ROLLOUTS_SCRIPT, ROLLOUTS_SECTION, ROLLOUTS_STYLE
from gateway.api.dashboard_script import SCRIPT

POLL_S = 2.0
# Everything the page loads is inline; it may only fetch its own origin.
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)

_STYLE = """
:root{--ok:#2e7d32;--okb:#e8f5e9;--warn:#b26a00;--warnb:#fff3e0;--bad:#c62828;--badb:#ffebee;
--mute:#666;--line:#ddd;--card:#fff;--bg:#f5f6f8}
*{box-sizing:border-box}
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:var(--bg);
color:#1d1d1f}
header{display:flex;flex-wrap:wrap;align-items:center;gap:12px;padding:10px 18px;
background:#1f2937;color:#fff;position:sticky;top:0;z-index:2}
header h1{font-size:17px;margin:0}
.badge{padding:2px 9px;border-radius:10px;font-weight:600;font-size:12px}
.badge.ok{background:var(--ok);color:#fff}.badge.bad{background:var(--bad);color:#fff}
.badge.warn{background:var(--warn);color:#fff}
#asof{margin-left:auto;font-variant-numeric:tabular-nums}#conn{font-size:12px;color:#fbb}
main{padding:12px 18px}
h2{font-size:14px;margin:18px 0 8px;text-transform:uppercase;letter-spacing:.04em;color:#444}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px;
margin-bottom:12px}
.card h3{margin:0 0 6px;font-size:15px}
.facts{display:flex;flex-wrap:wrap;gap:6px 16px;color:#333;margin-bottom:6px}
.facts b{font-weight:600}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px}
.chart{border:1px solid #eee;border-radius:6px;padding:4px 6px;background:#fcfcfd}
.chart .title{font-size:12px;color:#333;display:flex;flex-wrap:wrap;justify-content:space-between}
.legend{font-size:11px}
.chart svg{width:100%;height:110px;display:block}
.legend span{margin-left:8px;white-space:nowrap}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(250px,1fr));gap:8px}
.poolbody{display:grid;grid-template-columns:minmax(0,1fr) 320px;gap:10px;align-items:start}
@media (max-width:900px){.poolbody{grid-template-columns:1fr}}
.tile{border:1px solid var(--line);border-left:6px solid var(--ok);border-radius:6px;
padding:6px 8px;background:#fff}
.tile.warn{border-left-color:var(--warn);background:var(--warnb)}
.tile.bad{border-left-color:var(--bad);background:var(--badb)}
.tile .name{font-weight:600;font-size:14px}.tile .url{color:var(--mute);font-size:11px}
.word-ok{color:var(--ok);font-weight:600}.word-warn{color:var(--warn);font-weight:600}
.word-bad{color:var(--bad);font-weight:600}.mute{color:var(--mute)}
table{border-collapse:collapse;width:100%;background:#fff}
td,th{border-bottom:1px solid #eee;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f1f3;font-weight:600}
tr.bad td{background:var(--badb)}tr.warn td{background:var(--warnb)}
.bar{display:inline-block;width:70px;height:8px;background:#eee;border-radius:4px;
vertical-align:middle;margin-right:6px;overflow:hidden}.bar i{display:block;height:100%}
#events{max-height:420px;overflow:auto}
.ev{display:grid;grid-template-columns:72px 110px 130px 1fr;gap:8px;padding:3px 6px;
border-bottom:1px solid #f0f0f0}
.ev.bad{background:var(--badb)}.ev.warn{background:var(--warnb)}.ev.ok{background:var(--okb)}
.ev time{font-variant-numeric:tabular-nums;color:#333}
#keyform{display:none;gap:6px;align-items:center}
select,input,button{font:inherit}
"""

_HEADER = """
<header>
  <h1>v2-gateway</h1><span id="ready" class="badge">loading</span>
  <form id="keyform">admin key <input id="keyinput" type="password" autocomplete="off">
    <button type="submit">use</button></form>
  <span id="conn"></span>
  <label>window <select id="span"><option value="60">1 min</option>
    <option value="300" selected>5 min</option><option value="600">10 min</option></select></label>
  <span id="asof">as of —</span>
</header>
"""
# The page's sections, top to bottom (a new panel is one more entry).
SECTIONS = (
    FLEET_SECTION,
    f"<h2>Pools and replicas</h2>{CONTROLS_BAR}<div id='pools'></div>",
    ROLLOUTS_SECTION,  # only while a model declares a rollout
    "<h2>Gateway</h2><div id='overview' class='card'></div>",
    "<h2>Models</h2><div id='models'></div>",
    "<h2>SLOs</h2><div id='slos' class='card'></div>",
    "<h2>Events <span id='eventcounts' class='mute'></span></h2>"
    "<div id='events' class='card'></div>",
)


def render_dashboard() -> str:
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        "<link rel='icon' href='data:,'><title>v2-gateway dashboard</title>"
        f"<style>{_STYLE}{CONTROLS_STYLE}{FLEET_STYLE}{ROLLOUTS_STYLE}</style></head><body>"
        + _HEADER
        + "<main>"
        + "".join(SECTIONS)
        + "</main>"
        + f"<script>const POLL_MS = {int(POLL_S * 1000)};\n{SCRIPT}{CONTROLS_SCRIPT}"
        + f"{FLEET_SCRIPT}{ROLLOUTS_SCRIPT}</script>"
        "</body></html>"
    )


_PAGE = render_dashboard()


def dashboard_response() -> HTMLResponse:
    """The page, never cached (a new gateway version may change it), under `CSP`."""
    headers = {"content-security-policy": CSP, "cache-control": "no-store"}
    return HTMLResponse(_PAGE, headers=headers)
