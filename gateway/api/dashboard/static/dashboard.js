/* The dashboard's main script: polls the control plane and draws the page, top to bottom.

Every POLL_MS it fetches /admin/state, /admin/history, /slo and /admin/fleet (same origin,
with the key when it holds one) and redraws the header, fleet (fleet.js), overview, models,
pools with their replica tiles (and operator buttons, controls.js), SLOs and the event
timeline. A replica's latency is shown only while it serves (a dead replica's last average is
stale), its last error with when it happened, and the timeline keeps an ejection after it has
expired. Charts span the chosen window; a pool's chart ends on the counts its tiles show (the
same /admin/state answer), and a model without requests in the window is one line instead of
empty charts. Hedging reads as configured, and as suspended while the burn policy withholds it.
Loaded after common.js, chart.js, controls.js and fleet.js, whose names it uses at once.
*/
"use strict";
const BREAKER_LEVELS = {closed: "ok", open: "bad", "half-open": "warn"};
let timer = null;  // the next poll

function renderHeader(state) {
  const ready = $("ready");
  ready.textContent = state.ready ? "ready" : "NOT READY";
  ready.className = "badge " + (state.ready ? "ok" : "bad");
}

function renderOverview(state, hist, span) {
  const b = state.retry_budget, st = state.state_store;
  const store = st.degraded ? word("degraded", "bad") : word("ok", "ok");
  const fallbacks = Object.entries(state.fallbacks).map(([name, f]) =>
    `<span>fallback <b>${esc(name)}</b>: ${f.ok ? word("verified", "ok") : word("refused", "bad")}`
    + ` <span class="mute">${esc(f.reason)}, checked ${esc(clock(f.checked_at))}</span></span>`);
  $("overview").innerHTML = `<div class="facts">
    <span>retry budget <b>${esc(fmt(b.balance))}</b> retries left
      <span class="mute">(${esc(b.ratio)} × requests + ${esc(b.min_per_s)}/s over
      ${esc(b.window_s)} s; spent ${esc(b.spent_total)}, refused ${esc(b.refused_total)})</span>
    </span>
    <span>hedges <b>${esc(state.hedges.sent)}</b> sent, <b>${esc(state.hedges.won)}</b> won</span>
    <span>state store <b>${esc(st.backend)}</b> ${store}</span>${fallbacks.join("")}</div>
    <div class="charts">${chart("retry-budget", "retry budget balance", hist.t,
      [{name: "balance", values: hist.retry_budget}], {span, now: hist.as_of})}</div>`;
}

function policyText(policy) {
  if (!policy) return "—";
  if (!policy.enabled) return `<span class="mute">off</span>`;
  if (!policy.engaged) return word("normal", "ok");
  const a = policy.adjustment;
  return word("engaged", "bad") + esc(since(policy.since)) + ` <span class="mute">retry budget ×`
    + `${esc(a.retry_budget_factor)}, hedging ${a.hedging_enabled ? "on" : "off"}, fallback`
    + ` margin ×${esc(a.fallback_margin_factor)}</span>`;
}

function hedgingText(m) {  // configured hedging, which the burn policy may suspend
  if (!m.hedging) return `<span class="mute" data-hedging="off">off</span>`;
  return m.policy.hedging_enabled ? `<span data-hedging="on">${word("on", "ok")}</span>`
    : `<span data-hedging="suspended">${word("suspended by the burn policy", "warn")}</span>`;
}

function escalationText(m) {  // the burn policy's vote on a single route, and why
  const e = m.escalation;
  if (!e) return "";
  const state = e.engaged
    ? `<span data-escalation="engaged">${word("voted", "bad")}${esc(since(e.since))} over `
      + `<b>${esc(e.vote_pools.join(", "))}</b> <span class="mute">(${esc(e.reason)})</span></span>`
    : `<span data-escalation="off">${word("single route", "ok")}</span>`;
  return `<span>escalation ${state}</span>`;
}

function correctnessText(s) {  // each correctness SLO's estimate with its interval
  return (s.slos || []).filter((x) => x.kind === "correctness").map((x) => {
    const [low, high] = x.wrong_rate_interval || [0, 1];
    const rate = x.wrong_rate == null ? "—" : `${(100 * x.wrong_rate).toFixed(2)} %`;
    return `<span data-correctness="${esc(x.name)}">wrong answers <b>${esc(rate)}</b> `
      + `<span class="mute">(95 %: ${esc((100 * low).toFixed(2))}–${esc((100 * high).toFixed(2))}`
      + ` %, ${esc(x.events.total)} judged)</span></span>`;
  }).join("");
}

function modelCharts(name, h, t, span, now, refs) {
  const burn = Object.entries(h.slo || {}).map(([n, v]) => ({name: n, values: v.burn}));
  return `<div class="charts">
    ${chart(name + "-rate", "requests/s", t, [{name: "rate", values: h.rate || []}],
      {span, now, unit: "/s"})}
    ${chart(name + "-errors", "error / degraded share", t, [
      {name: "5xx", values: h.error_share || [], color: "#c62828"},
      {name: "degraded", values: h.degraded_share || [], color: "#ef6c00"},
      {name: "fallback", values: h.fallback_share || [], color: "#6a1b9a"}],
      {span, now, unit: "%", floor: 0.01})}
    ${chart(name + "-latency", "latency", t, [
      {name: "p50", values: h.p50_ms || [], color: "#1565c0"},
      {name: "p99", values: h.p99_ms || [], color: "#c62828"}],
      {span, now, unit: "ms"})}
    ${burn.length ? chart(name + "-burn", "SLO burn rate (5 min)", t, burn,
      {span, now, unit: "×", refs}) : ""}</div>`;
}

function renderModels(state, hist, slo, span) {
  const page = (slo.alert_rules || []).find((r) => r.severity === "page");
  const refs = [{value: 1, label: "1× (on budget)", fit: true}];
  if (page) refs.push({value: page.factor, label: `${page.factor}× page`});
  const html = Object.entries(state.models).map(([name, m]) => {
    const h = hist.models[name] || {}, s = (slo.models || {})[name] || {};
    const idle = !(h.rate || []).some((v) => v > 0);  // no charts of nothing
    const quiet = `<span class="mute">no requests in the last ${esc(span / 60)} min</span>`;
    return `<div class="card" data-model="${esc(name)}" data-idle="${idle ? "yes" : "no"}">`
      + `<h3>${esc(name)} ${m.ready ? word("ready", "ok") : word("not ready", "bad")}</h3>
      <div class="facts">
      <span>route <b>${esc(m.route)}</b></span><span>pools <b>${esc(m.pools.join(", "))}</b></span>
      <span>in flight <b>${esc(m.in_flight)}</b>/${esc(m.max_in_flight)}</span>
      <span>shed <b>${esc(m.shed)}</b></span>
      <span>hedging ${hedgingText(m)}</span>
      <span>burn policy ${policyText(s.policy)}</span>${escalationText(m)}${correctnessText(s)}`
      + `${idle ? quiet : ""}</div>`
      + `${idle ? "" : modelCharts(name, h, hist.t, span, hist.as_of, refs)}</div>`;
  });
  $("models").innerHTML = html.join("");
}

function tile(r, seen) {
  const breaker = (r.breaker || {}).state || "none";
  const health = r.healthy === true ? "healthy" : r.healthy === false ? "unhealthy" : "unknown";
  const held = holding("replica:" + r.id);  // an operator's drain or eject
  const serving = r.healthy === true && !r.ejected && !r.quarantined && !held;
  let level = "ok";
  if (r.healthy === false || r.quarantined || breaker === "open") level = "bad";
  else if (r.ejected || held || breaker === "half-open" || r.healthy !== true) level = "warn";
  const healthWord = word(health === "unknown" ? "not probed yet" : health,
    {healthy: "ok", unhealthy: "bad", unknown: "warn"}[health]);
  const down = r.healthy === false ? esc(since(seen.unhealthy_since)) : "";
  const lines = [`health ${healthWord}${down}`,
    `breaker ${word(breaker, BREAKER_LEVELS[breaker] || "warn")}`];
  if (r.ejected) {
    lines.push(`${word("ejected", "warn")}: ${esc(r.ejection_reason || "")}${esc(since(
      seen.ejected_since))}, ${esc(r.ejected_for_s.toFixed(0))} s left`);
  }
  if (r.quarantined) {
    lines.push(`${word("quarantined", "bad")}: ${esc(r.quarantine_reason || "")}${esc(since(
      seen.quarantined_since))}, ${esc(r.quarantined_for_s.toFixed(0))} s left`);
  }
  lines.push(serving ? `latency <b>${esc(fmt(r.ewma_latency_ms, "ms"))}</b> <span class="mute">`
    + `(moving average)</span>` : `latency <span class="mute">— (not serving)</span>`);
  if (r.last_error) {
    const at = seen.last_error_at;
    lines.push(`<span class="mute" data-last-error>last error${at == null ? ""
      : ` ${esc(clock(at))} (${esc(ago(at))})`}: ${esc(r.last_error)}</span>`);
  }
  lines.push(`<span class="mute">requests ${esc(r.requests)} · failures ${esc(r.failures)} · `
    + `outstanding ${esc(r.outstanding)}${r.standby ? " · standby" : ""}</span>`);
  if (r.reported_queue != null) {  // what it reported of its load (load-aware pools)
    lines.push(`<span class="mute" data-reported-queue>reported queue <b>`
      + `${esc(fmt(r.reported_queue, ""))}</b> · ${esc(r.reported_by)} `
      + `${esc(fmt(r.reported_age_s, ""))} s ago</span>`);
  }
  return `<div class="tile ${level}" data-replica="${esc(r.id)}" data-health="${health}"`
    + ` data-ejected="${r.ejected ? "yes" : "no"}" data-level="${level}"`
    + ` data-held="${held ? esc(held.action) : "no"}"><div class="name">`
    + `${esc(r.id)} <span class="url">${esc(r.url)}${r.zone ? " · " + esc(r.zone) : ""}</span>`
    + `</div>${heldLine(r)}${lines.map((l) => `<div>${l}</div>`).join("")}`
    + `${replicaControls(r)}</div>`;
}

// A pool's counts now, read from the same replicas its tiles are drawn from.
function poolNow(p) {
  const count = (test) => p.replicas.filter(test).length;
  return {healthy: p.healthy, ejected: count((r) => r.ejected),
    quarantined: count((r) => r.quarantined),
    open_breakers: count((r) => ((r.breaker || {}).state) === "open")};
}

function renderPools(state, hist, span) {
  $("pools").innerHTML = state.pools.map((p) => {
    const h = hist.pools[p.name] || {}, now = poolNow(p), t = [...hist.t, hist.as_of];
    const series = (field) => [...(h[field] || hist.t.map(() => null)), now[field]];
    const tiles = [...p.replicas, ...p.draining]  // drained ones too: their in-flight, restore
      .map((r) => tile(r, hist.replicas[r.id] || {})).join("");
    return `<div class="card" data-pool="${esc(p.name)}"><h3>${esc(p.name)} <span class="mute">→ `
      + `${esc(p.model)}${p.version ? " v" + esc(p.version) : ""}</span>${poolControls(p)}</h3>`
      + `<div class="facts">`
      + `<span><b>${esc(p.healthy)}</b>/${esc(p.size)} healthy</span><span><b>${esc(now.ejected)}`
      + `</b> ejected</span>${p.panic ? word("PANIC: balancing over all replicas", "bad") : ""}`
      + `${p.saturated ? word("SATURATED: sheddable requests refused", "bad") : ""}`
      + `</div><div class="poolbody"><div class="tiles">${tiles}</div>`
      + `${chart(p.name + "-replicas", "replicas", t, [
        {name: "healthy", values: series("healthy"), color: "#2e7d32"},
        {name: "ejected", values: series("ejected"), color: "#ef6c00"},
        {name: "quarantined", values: series("quarantined"), color: "#c62828"},
        {name: "open breakers", values: series("open_breakers"), color: "#6a1b9a"}],
        {span, now: hist.as_of, floor: p.size})}</div></div>`;
  }).join("");
}

function renderSlos(slo) {
  const rows = [];
  for (const [model, entry] of Object.entries(slo.models || {})) {
    for (const s of entry.slos || []) {
      const left = s.error_budget.remaining, firing = s.alerts.filter((a) => a.firing);
      const level = firing.length ? "bad" : left < 0.5 ? "warn" : "";
      const color = left < 0.25 ? "#c62828" : left < 0.5 ? "#ef6c00" : "#2e7d32";
      const pct = Math.max(0, Math.min(1, left)) * 100;
      const burns = Object.entries(s.burn_rates).map(([w, v]) => `${esc(w)} ${esc(fmt(v, "×"))}`);
      const alerts = firing.length ? firing.map((a) => word(`${a.severity} ${a.name}`, "bad")
        + esc(since(a.since))).join("<br>") : word("none", "ok");
      const ev = s.events;
      rows.push(`<tr class="${level}" data-slo="${esc(model + "/" + s.name)}">
        <td><b>${esc(model)}/${esc(s.name)}</b>${s.tenant ? " · tenant " + esc(s.tenant) : ""}</td>
        <td>${esc(s.kind)}</td><td>${esc(fmt(s.objective, "%"))}</td>
        <td>${s.threshold_ms != null ? esc(fmt(s.threshold_ms, "ms")) : "—"}</td>
        <td>${esc(ev.good)}/${esc(ev.total)} good · ${esc(ev.bad)} bad · ${esc(ev.degraded)}`
        + ` degraded</td><td>${s.sli == null ? "—" : esc(fmt(s.sli, "%"))}</td>
        <td><span class="bar"><i style="width:${pct.toFixed(0)}%;background:${color}"></i></span>`
        + `${esc(fmt(left, "%"))}</td><td>${burns.join("<br>")}</td><td>${alerts}</td></tr>`);
    }
  }
  $("slos").innerHTML = rows.length ? `<table><tr><th>SLO</th><th>kind</th><th>objective</th>`
    + `<th>threshold</th><th>events (window)</th><th>SLI</th><th>budget left</th>`
    + `<th>burn rates</th><th>alerts firing</th></tr>${rows.join("")}</table>`
    : `<span class="mute">no SLO configured</span>`;
}

function renderEvents(hist) {
  const counts = Object.entries(hist.event_counts).map(([k, n]) => `${k} ${n}`).join(" · ");
  $("eventcounts").textContent = counts ? "(" + counts + ")" : "";
  $("events").innerHTML = hist.events.length ? hist.events.map((e) =>
    `<div class="ev ${esc(e.level)}" data-kind="${esc(e.kind)}" data-subject="${esc(e.subject)}">`
    + `<time title="${esc(new Date(e.t * 1000).toISOString())}">${esc(clock(e.t))}</time>`
    + `<b>${esc(e.kind)}</b><span>${esc(e.subject)}</span><span>${esc(e.detail)}</span></div>`)
    .join("") : `<span class="mute">no events yet</span>`;
}

function stamp() {
  if (asOf == null) return;
  const age = (Date.now() - lastOk) / 1000;
  $("asof").textContent = `as of ${clock(asOf)}` + (age > 3 * POLL_MS / 1000
    ? ` — STALE (${age.toFixed(0)} s without an update)` : "");
  $("asof").title = new Date(asOf * 1000).toISOString() + " (the gateway's clock)";
}

async function poll() {
  try {
    const span = Number($("span").value);
    const [state, hist, slo, fleet] = await Promise.all([getJSON("/admin/state"),
      getJSON(`/admin/history?seconds=${span}&events=200`), getJSON("/slo"), fleetOf()]);
    asOf = hist.as_of;
    renderHeader(state);
    renderFleet(fleet);
    renderOverview(state, hist, span);
    renderModels(state, hist, slo, span);
    heldOf(state);
    renderPools(state, hist, span);
    renderSlos(slo);
    renderEvents(hist);
    lastOk = Date.now();
    $("conn").textContent = "";
    $("keyform").style.display = "none";
    document.body.dataset.updated = String(lastOk);
  } catch (error) {
    if (error instanceof NeedKey) {
      $("keyform").style.display = "flex";
      $("conn").textContent = "this gateway needs its admin key";
    } else {
      $("conn").textContent = "update failed: " + error.message;
    }
  }
  stamp();
  clearTimeout(timer);
  timer = setTimeout(poll, POLL_MS);
}

$("keyform").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("keyinput").value.trim());
  $("keyinput").value = "";
  poll();
});
$("span").addEventListener("change", () => poll());
setInterval(stamp, 1000);
poll();
