/* The dashboard's fleet section: every gateway of the namespace.

Drawn from /admin/fleet at the top of the page: one row per gateway instance (alive or stale
by its last heartbeat, last seen, version, up since, answers/s, 5xx share) with its verdict on
each replica as coloured words, so two gateways that judge a replica differently show it side
by side. Without shared state the section says it shows this instance only. A failed fleet
request leaves the rest of the page drawing.
*/
"use strict";
const VERDICT_LEVELS = {serving: "ok", unhealthy: "bad", quarantined: "bad",
  "breaker open": "bad"};  // anything else (ejected, drained, half-open, not probed): warn

async function fleetOf() {  // the fleet view is extra: the page draws without it
  try { return await getJSON("/admin/fleet"); } catch (error) {
    if (error instanceof NeedKey) throw error;
    return {error: error.message};
  }
}

function renderFleet(fleet) {
  if (fleet.error) {
    $("fleetscope").textContent = "";
    $("fleet").innerHTML = `<span class="mute">fleet view unavailable: ${esc(fleet.error)}</span>`;
    return;
  }
  const n = fleet.instances.length;
  $("fleetscope").textContent = fleet.shared
    ? `(${fleet.alive}/${n} alive · ${fleet.scope})` : `(${fleet.scope})`;
  const store = fleet.store && fleet.store.degraded
    ? `<div>${word("state store unreachable", "bad")}${esc(since(fleet.store.since))}: the `
      + `others as last seen</div>` : "";
  const rows = fleet.instances.map((i) => {
    const verdicts = Object.entries(fleet.replicas).filter(([, by]) => i.instance in by)
      .map(([rid, by]) => `<span data-fleet-replica="${esc(rid)}">${esc(rid)} `
        + `${word(by[i.instance], VERDICT_LEVELS[by[i.instance]] || "warn")}</span>`).join("");
    const state = i.alive ? word("alive", "ok") : word("stale", "bad");
    return `<tr class="${i.alive ? "" : "bad"}" data-instance="${esc(i.instance)}"`
      + ` data-alive="${i.alive ? "yes" : "no"}"><td><b>${esc(i.instance)}</b>`
      + `${i.self ? ' <span class="mute">(this one)</span>' : ""}</td><td>${state}</td>`
      + `<td>${esc(clock(i.last_seen))} <span class="mute">${esc(ago(i.last_seen))}</span></td>`
      + `<td>${esc(i.version)}</td><td>${esc(clock(i.started))}</td>`
      + `<td>${esc(fmt(i.rate, "/s"))}</td><td>${esc(fmt(i.error_rate, "%"))}</td>`
      + `<td><div class="verdicts">${verdicts}</div></td></tr>`;
  });
  $("fleet").innerHTML = `${store}<table><tr><th>gateway</th><th>state</th><th>last seen</th>`
    + `<th>version</th><th>up since</th><th>answers</th><th>5xx</th>`
    + `<th>its verdict on each replica</th></tr>${rows.join("")}</table>`;
}
