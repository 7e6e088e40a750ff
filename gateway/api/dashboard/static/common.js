/* The dashboard's shared helpers: the admin key, fetching, escaping, and words for numbers.

Loaded first (index.html); every other script of the page uses these names. Plain ES2020, no
library. Every string from the gateway goes through `esc` before it reaches innerHTML, and
health is shown as words and colours, never a language's true/false. The key comes from a
#key= fragment or the page's form and is kept in sessionStorage (this tab only).
*/
"use strict";
const POLL_MS = 2000;  // how often the page asks the gateway again
const KEY = "v2-gateway-admin-key";
const $ = (id) => document.getElementById(id);
const ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"};
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
const COLORS = ["#1565c0", "#c62828", "#ef6c00", "#6a1b9a", "#2e7d32", "#00838f"];
let lastOk = null;  // when (browser time, ms) the last poll succeeded
let asOf = null;  // the gateway's wall clock in that answer (s)

(function keyFromFragment() {  // #key=...: kept for this tab only, then removed from the URL
  const m = /(?:^#|&)key=([^&]*)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
})();

class NeedKey extends Error {}

async function getJSON(path) {
  const key = sessionStorage.getItem(KEY);
  const headers = key ? {Authorization: "Bearer " + key} : {};
  const answer = await fetch(path, {headers, cache: "no-store"});
  if (answer.status === 401) throw new NeedKey(path);
  if (!answer.ok) throw new Error(path + ": HTTP " + answer.status);
  return answer.json();
}

const pad = (n) => String(n).padStart(2, "0");
function clock(t) {
  if (t == null) return "—";
  const d = new Date(t * 1000);
  return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
}
function ago(t) {
  if (t == null || asOf == null) return "";
  const s = Math.max(0, asOf - t);
  if (s < 90) return s.toFixed(0) + " s ago";
  return s < 5400 ? (s / 60).toFixed(0) + " min ago" : (s / 3600).toFixed(1) + " h ago";
}
const since = (t) => t == null ? "" : ` since ${clock(t)} (${ago(t)})`;
function fmt(v, unit) {
  if (v == null || Number.isNaN(v)) return "—";
  if (unit === "%") return (v * 100).toFixed(v < 0.1 ? 2 : 1) + " %";
  if (unit === "ms") return (v < 10 ? v.toFixed(2) : v.toFixed(0)) + " ms";
  if (unit === "/s") return v.toFixed(v < 10 ? 2 : 0) + "/s";
  if (unit === "×") return v.toFixed(2) + "×";
  return v.toFixed(Number.isInteger(v) ? 0 : 2);
}
const word = (text, level) => `<span class="word-${level}">${esc(text)}</span>`;

