// Inline SVG charts, drawn here: a line chart of series over time, and bars against a quota.

const NS = "http://www.w3.org/2000/svg";
const COLORS = ["#0b6e6e", "#b3541e", "#4a4fb5", "#7a6a00"];

function svg(tag, attrs = {}, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function short(n) {
  if (n >= 1e9) return `${+(n / 1e9).toFixed(1)}G`;
  if (n >= 1e6) return `${+(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${+(n / 1e3).toFixed(1)}k`;
  return String(+n.toFixed(2));
}

/**
 * A line chart. `labels`: x labels; `series`: [{name, values}] (a `null` value is a gap:
 * nothing measured); `limit`: an optional {name, value} drawn as a dashed line (a quota);
 * `format`: how values read (axis, tooltips, data table). The figure has a title and a
 * data table alternative (a visually hidden table) for screen readers.
 */
export function lineChart({ title, labels, series, limit = null, format = short }) {
  const width = 640;
  const height = 240;
  const pad = { left: 56, right: 28, top: 16, bottom: 36 };
  const innerW = width - pad.left - pad.right;
  const innerH = height - pad.top - pad.bottom;
  const measured = series.flatMap((s) => s.values).filter((v) => v !== null);
  const highest = Math.max(0, ...measured);
  // A limit far above the data would flatten it into the axis: then the legend says it.
  const drawLimit = limit && (highest === 0 || limit.value <= 4 * highest);
  const max = niceMax(Math.max(highest, drawLimit ? limit.value : 0));
  const x = (i) => pad.left + (labels.length <= 1 ? innerW / 2 : (i * innerW) / (labels.length - 1));
  const y = (v) => pad.top + innerH - (v / max) * innerH;

  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", class: "chart", "aria-label": title });
  root.append(svg("title", {}, title));
  for (let t = 0; t <= 4; t += 1) {
    const v = (max * t) / 4;
    root.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: y(v), y2: y(v), class: "grid" }));
    root.append(svg("text", { x: pad.left - 6, y: y(v) + 4, "text-anchor": "end", class: "axis" }, format(v)));
  }
  const every = Math.max(1, Math.ceil(labels.length / 7));
  labels.forEach((label, i) => {
    if (i % every === 0 || i === labels.length - 1) {
      root.append(svg("text", { x: x(i), y: height - 12, "text-anchor": "middle", class: "axis" }, label));
    }
  });
  if (drawLimit) {
    root.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: y(limit.value), y2: y(limit.value), class: "limit", "data-limit": limit.value }));
    root.append(svg("text", { x: width - pad.right, y: y(limit.value) - 4, "text-anchor": "end", class: "axis" }, `${limit.name}: ${format(limit.value)}`));
  }
  series.forEach((s, si) => {
    const color = COLORS[si % COLORS.length];
    // One line per run of measured values: a gap stays a gap.
    let run = [];
    const flush = () => {
      if (run.length) root.append(svg("polyline", { points: run.join(" "), fill: "none", stroke: color, "stroke-width": 2.5, class: "series", "data-series": s.name }));
      run = [];
    };
    s.values.forEach((v, i) => {
      if (v === null) {
        flush();
        return;
      }
      run.push(`${x(i)},${y(v)}`);
      const dot = svg("circle", { cx: x(i), cy: y(v), r: 3, fill: color });
      dot.append(svg("title", {}, `${s.name}, ${labels[i]}: ${format(v)}`));
      root.append(dot);
    });
    flush();
  });

  const figure = document.createElement("figure");
  figure.className = "chart-figure";
  if (limit) figure.dataset.limit = String(limit.value);
  const caption = document.createElement("figcaption");
  caption.textContent = title;
  const legend = document.createElement("ul");
  legend.className = "legend";
  series.forEach((s, si) => {
    const li = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = COLORS[si % COLORS.length];
    li.append(swatch, ` ${s.name}`);
    legend.append(li);
  });
  if (limit) {
    const li = document.createElement("li");
    const swatch = document.createElement("span");
    swatch.className = "swatch limit";
    li.append(swatch, ` ${limit.name} (${format(limit.value)}${drawLimit ? "" : ", far above this chart"})`);
    legend.append(li);
  }
  figure.append(caption, root, legend, dataTable(labels, series, format));
  return figure;
}

function dataTable(labels, series, format) {
  const t = document.createElement("table");
  t.className = "visually-hidden";
  const head = t.createTHead().insertRow();
  for (const text of ["", ...series.map((s) => s.name)]) {
    const th = document.createElement("th");
    th.textContent = text;
    head.append(th);
  }
  const body = t.createTBody();
  labels.forEach((label, i) => {
    const row = body.insertRow();
    row.insertCell().textContent = label;
    for (const s of series) {
      const cell = row.insertCell();
      const v = s.values[i];
      cell.textContent = v === null ? "not measured" : format(v);
      if (v !== null) cell.dataset.value = String(v);
    }
  });
  return t;
}

/**
 * Horizontal bars of use against a quota: [{label, used, quota (null: unlimited), format}].
 */
export function quotaBars({ title, items }) {
  const figure = document.createElement("figure");
  figure.className = "chart-figure quotas";
  const caption = document.createElement("figcaption");
  caption.textContent = title;
  figure.append(caption);
  for (const item of items) {
    const fmt = item.format || String;
    const row = document.createElement("div");
    row.className = "quota";
    const label = document.createElement("div");
    label.className = "quota-label";
    const limit = item.quota === null || item.quota === undefined ? "no limit" : fmt(item.quota);
    label.textContent = `${item.label}: ${fmt(item.used)} of ${limit}`;
    const share = item.quota ? Math.min(1, item.used / item.quota) : 0;
    const bar = svg("svg", { viewBox: "0 0 100 8", preserveAspectRatio: "none", class: "quota-bar", role: "img",
      "aria-label": `${item.label}: ${item.quota ? Math.round(share * 100) : 0}% of the quota` });
    bar.append(svg("rect", { x: 0, y: 0, width: 100, height: 8, class: "quota-track" }));
    bar.append(svg("rect", { x: 0, y: 0, width: Math.max(share * 100, item.used > 0 ? 0.5 : 0), height: 8,
      class: share >= 0.9 ? "quota-fill over" : "quota-fill" }));
    row.append(label, bar);
    figure.append(row);
  }
  return figure;
}
