/* The dashboard's rollout panel: each model's rollout at a glance.

From /admin/rollouts, polled with the page: the phase as a coloured word, the candidate's
share of traffic and the steps, the agreement with its interval against the target (and a
chart of both over the minutes this page has been open: the page keeps the samples it saw,
the gateway keeps none), the evidence of the step, and the trail of decisions (who or which
rule, what, why). Hidden while no model declares a rollout; a failed request leaves the rest
of the page drawing. Loaded last: it starts its own polling.
*/
"use strict";
const PHASE_LEVELS = {shadow: "ok", canary: "ok", promoted: "ok", paused: "warn",
  waiting: "warn", unknown: "warn", rolled_back: "bad", aborted: "bad"};
const rolloutSeen = {};  // model -> {t: [], agreement: [], low: [], share: []}

function rolloutSamples(name, r) {
  const s = rolloutSeen[name] || (rolloutSeen[name] = {t: [], agreement: [], low: [], share: []});
  const e = r.evidence.step;
  s.t.push(Date.now() / 1000);
  s.agreement.push(e.agreement);
  s.low.push(e.compared ? e.interval[0] : null);
  s.share.push(r.share_percent / 100);
  if (s.t.length > 600) for (const k of Object.keys(s)) s[k].shift();
  return s;
}

function rolloutCard(name, r, span) {
  const e = r.evidence.step, total = r.evidence.total;
  const s = rolloutSamples(name, r);
  const now = s.t[s.t.length - 1];
  const steps = r.mode === "canary" ? r.steps.map((p, i) => i === r.step
    && ["canary", "paused"].includes(r.phase) ? `<b>${p}%</b>` : `${p}%`).join(" → ") : "—";
  const agreement = e.compared ? `${fmt(e.agreement, "%")} (${e.agreed}/${e.compared}, `
    + `${fmt(e.interval[0], "%")}–${fmt(e.interval[1], "%")})` : "no comparisons yet";
  const trail = r.trail.slice().reverse().map((d) => `<tr><td>${esc(clock(d.at))}</td>`
    + `<td>${esc(d.action)}</td><td>${esc(d.who)}</td><td>${esc(d.share_before)}% → `
    + `${esc(d.share_percent)}%</td><td>${esc(d.why)}</td></tr>`).join("");
  const charts = chart(`rollout-${name}`, "agreement (this step) vs target", s.t,
    [{name: "agreement", values: s.agreement}, {name: "interval low", values: s.low}],
    {span, now, unit: "%", floor: 1, refs: [{value: r.agreement_target, label: "target"}]})
    + chart(`rollout-share-${name}`, "candidate's share", s.t,
      [{name: "share", values: s.share}], {span, now, unit: "%", floor: 1});
  const dis = Object.entries(total.disagreements).map(([o, n]) => `${esc(o)} ${n}`).join(", ");
  return `<div class="card" data-rollout="${esc(name)}" data-phase="${esc(r.phase)}">`
    + `<h3>${esc(name)}: ${esc(r.pool)} → ${esc(r.candidate)} `
    + `${word(r.phase.replace("_", " "), PHASE_LEVELS[r.phase] || "warn")}</h3>`
    + `<div class="facts"><span><b>mode</b> ${esc(r.mode)}</span><span><b>share</b> `
    + `<span class="share"><i style="width:${r.share_percent}%"></i></span> `
    + `${esc(r.share_percent)}%</span><span><b>steps</b> ${steps}</span>`
    + `<span><b>agreement</b> ${agreement} · target ${fmt(r.agreement_target, "%")}</span>`
    + `<span><b>candidate</b> ${e.candidate_requests} requests, ${e.candidate_errors} errors,`
    + ` p99 ${fmt(e.candidate_latency_ms.p99, "ms")} (pool ${fmt(e.current_latency_ms.p99,
      "ms")})</span><span><b>in all</b> ${total.compared} compared`
    + `${dis ? ", differing: " + dis : ""}, ${total.shadow_shed} copies shed</span></div>`
    + `<div class="charts">${charts}</div>`
    + `<table class="trail"><tr><th>when</th><th>what</th><th>who</th><th>share</th>`
    + `<th>why (evidence)</th></tr>${trail}</table></div>`;
}

async function pollRollouts() {
  try {
    const doc = await getJSON("/admin/rollouts");
    const names = Object.keys(doc.rollouts);
    $("rolloutsection").style.display = names.length ? "" : "none";
    const span = Number($("span").value);
    $("rollouts").innerHTML = names.map((n) => rolloutCard(n, doc.rollouts[n], span)).join("");
  } catch (error) {
    if (!(error instanceof NeedKey)) {
      $("rollouts").innerHTML = `<span class="mute">rollouts unavailable: ${esc(error.message)}`
        + `</span>`;
    }
  }
}
pollRollouts();
setInterval(pollRollouts, POLL_MS);
