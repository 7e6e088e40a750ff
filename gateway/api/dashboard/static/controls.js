/* The dashboard's operator controls: buttons on tiles and pools.

Shown only while the page holds an admin key (given as #key= or in the form): a page open
without one is read-only even on a loopback gateway that needs none. Every button asks
confirm() first, then POSTs the action as JSON with the key (the reason and an eject's
duration from the bar above the pools) and polls at once, so the tile shows the change. The
server audits the action under the key's operator name; the page never says who it is.
*/
"use strict";
const ACTION_TEXT = {
  drain: "Drain replica %s? It takes no new requests; those in flight finish.",
  eject: "Eject replica %s for %d s? It takes no new requests until then.",
  restore: "Return replica %s to service?",
  pause: "Pause pool %s? Its models fall back, or answer 503, until resumed.",
  resume: "Resume pool %s?",
};
const hasKey = () => Boolean(sessionStorage.getItem(KEY));
let decisions = {};  // target -> the decision in force, from /admin/state

function heldOf(state) {
  decisions = ((state.state_store || {}).decisions) || {};
  $("controlbar").style.display = hasKey() ? "flex" : "none";
}

function holding(target) {
  const d = decisions[target];
  return d && d.holds ? d : null;
}

const button = (action, kind, name) => `<button type="button" class="act" data-action=`
  + `"${action}" data-kind="${kind}" data-name="${esc(name)}">${action}</button>`;

function replicaControls(r) {
  if (!hasKey()) return "";
  const held = holding("replica:" + r.id);
  const actions = held ? ["restore"] : ["drain", "eject"];
  return `<div class="acts">${actions.map((a) => button(a, "replicas", r.id)).join("")}</div>`;
}

function heldLine(r) {
  const held = holding("replica:" + r.id);
  if (!held) return "";
  const left = held.until ? `, ${Math.max(0, held.until - (asOf || held.until)).toFixed(0)} s left`
    : "";
  const verb = word(held.action === "eject" ? "ejected" : "drained", "warn");
  if (held.by === "hardware") return `<div>${verb}: hardware — ${esc(held.reason)}</div>`;
  return `<div>${verb} by `
    + `${esc(held.by)}${held.reason ? ": " + esc(held.reason) : ""}${esc(left)}</div>`;
}

function poolControls(p) {
  const paused = holding("pool:" + p.name);
  const text = paused ? ` ${word("PAUSED", "bad")} <span class="mute">${esc(paused.state)}</span>`
    : "";
  return text + (hasKey() ? ` ${button(paused ? "resume" : "pause", "pools", p.name)}` : "");
}

async function act(kind, name, action) {
  const seconds = Number($("ejectfor").value) || 300;
  const question = ACTION_TEXT[action].replace("%s", name).replace("%d", seconds);
  if (!confirm(question)) return;
  const body = {reason: $("reason").value.trim()};
  if (action === "eject") body.duration_s = seconds;
  const answer = await fetch(`/admin/${kind}/${encodeURIComponent(name)}/${action}`, {
    method: "POST", cache: "no-store", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json",
              Authorization: "Bearer " + sessionStorage.getItem(KEY)}});
  const doc = await answer.json().catch(() => ({}));
  $("conn").textContent = answer.ok ? "" : `${action} ${name}: ${doc.error || answer.status}`;
  poll();
}

document.addEventListener("click", (event) => {
  const target = event.target.closest("button.act");
  if (target) act(target.dataset.kind, target.dataset.name, target.dataset.action);
});
