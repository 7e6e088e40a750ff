/* The dashboard's charts: one line chart as an inline SVG path, computed here.

No image, font or library (the page's Content-Security-Policy allows none). A chart spans the
window chosen in the header; a gap in a series (null) lifts the pen.
*/
"use strict";

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// One line chart: series [{name, values, color}] over the shared times t (gateway wall s),
// across the chosen window (o.span s), as its selector says.
function chart(id, title, t, series, o) {
  const W = 300, H = 110, L = 40, R = 6, T = 8, B = 16;
  const span = o.span, t0 = o.now - span;
  let max = o.floor || 0;
  for (const s of series) {
    s.values.forEach((v, i) => { if (t[i] >= t0 && v != null && v > max) max = v; });
  }
  for (const r of o.refs || []) max = Math.max(max, r.value * (r.fit ? 1 : 0));
  max = niceCeil(max > 0 ? max : 1);
  const x = (ts) => L + (W - L - R) * (ts - t0) / span;
  const y = (v) => T + (H - T - B) * (1 - Math.min(v, max) / max);
  let svg = `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(title)}">`;
  for (const g of [0, max / 2, max]) {
    svg += `<line x1="${L}" x2="${W - R}" y1="${y(g)}" y2="${y(g)}" stroke="#e3e3e3"/>`;
    svg += `<text x="${L - 3}" y="${y(g) + 3}" font-size="9" text-anchor="end" fill="#777">`
      + `${esc(fmt(g, o.unit))}</text>`;
  }
  for (const r of o.refs || []) {
    if (r.value > max) continue;
    svg += `<line x1="${L}" x2="${W - R}" y1="${y(r.value)}" y2="${y(r.value)}" stroke="#999"`
      + ` stroke-dasharray="3 3"/><text x="${W - R}" y="${y(r.value) - 2}" font-size="8"`
      + ` text-anchor="end" fill="#777">${esc(r.label)}</text>`;
  }
  const back = span < 120 ? `${span.toFixed(0)} s` : `${(span / 60).toFixed(0)} min`;
  svg += `<text x="${L}" y="${H - 3}" font-size="9" fill="#777">-${back}</text>`
    + `<text x="${W - R}" y="${H - 3}" font-size="9" text-anchor="end" fill="#777">now</text>`;
  let legend = "";
  series.forEach((s, k) => {
    const color = s.color || COLORS[k % COLORS.length];
    let d = "", pen = "M", lastPoint = null, latest = null;
    s.values.forEach((v, i) => {
      if (t[i] < t0 || v == null) { pen = "M"; return; }
      d += `${pen}${x(t[i]).toFixed(1)},${y(v).toFixed(1)}`;
      pen = "L"; lastPoint = [x(t[i]), y(v)]; latest = v;
    });
    if (d) svg += `<path d="${d}" fill="none" stroke="${color}" stroke-width="1.6"/>`;
    if (lastPoint) {
      svg += `<circle cx="${lastPoint[0]}" cy="${lastPoint[1]}" r="2.2" fill="${color}"/>`;
    }
    legend += `<span style="color:${color}" data-series="${esc(s.name)}" data-latest=`
      + `"${esc(latest)}">${esc(s.name)} ${esc(fmt(latest, o.unit))}</span>`;
  });
  svg += "</svg>";
  return `<div class="chart" data-chart="${esc(id)}"><div class="title"><span>${esc(title)}`
    + `</span><span class="legend">${legend}</span></div>${svg}</div>`;
}
