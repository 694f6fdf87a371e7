// proctor view: live batch rows (SSE) and the virtualized, sortable rollouts table.
"use strict";

const ORDER = ["completed", "failed", "interrupted", "running", "grading", "starting", "queued"];

function countsText(counts) {
  const rank = (s) => (ORDER.includes(s) ? ORDER.indexOf(s) : ORDER.length);
  const keys = Object.keys(counts).sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  const parts = keys.filter((k) => counts[k]).map((k) => `${k} ${counts[k]}`);
  return parts.length ? parts.join(" · ") : "none";
}
const fmtReward = (v) => (v === null || v === undefined ? "-" : v.toFixed(3));
const fmtCost = (v) => (v === null || v === undefined ? "-" : "$" + v.toFixed(4));
// A batch's cost as the server renders it (`batch_cost`): never $0.0000 for unpriced models.
function fmtBatchCost(b) {
  const unpriced = Array.isArray(b.unpriced) && b.unpriced.length > 0;
  if (unpriced && !b.priced) return "unpriced";
  return fmtCost(b.cost) + (unpriced ? " + unpriced" : "");
}
const fmtTime = (v) => (v ? new Date(v * 1000).toISOString().replace("T", " ").slice(0, 19) : "-");

function setText(root, selector, text) {
  const el = root.querySelector(selector);
  if (el) el.textContent = text;
}

const fmtRate = (v) => (v === null || v === undefined ? "-" : v.toFixed(2) + "/s");

// A cell holding one link, appended to the row; returns the link.
function linkCell(tr, cls, href, text) {
  const td = document.createElement("td");
  const a = document.createElement("a");
  a.className = cls;
  a.href = href;
  a.textContent = text;
  td.appendChild(a);
  tr.appendChild(td);
  return a;
}

function batchRow(b) {
  const tr = document.createElement("tr");
  tr.dataset.batch = b.name;
  linkCell(tr, "batch-link", "/b/" + encodeURIComponent(b.name), b.name);
  for (const cls of ["counts", "throughput num", "mean-reward num", "cost num", "started", "finished"]) {
    const cell = document.createElement("td");
    cell.className = cls;
    tr.appendChild(cell);
  }
  for (const select of document.querySelectorAll("form#compare select")) {
    const option = document.createElement("option");
    option.value = b.name;
    option.textContent = b.name;
    select.appendChild(option);
  }
  return tr;
}

function updateBatchRow(row, b) {
  setText(row, "td.counts", countsText(b.counts));
  setText(row, "td.throughput", fmtRate(b.throughput));
  setText(row, "td.mean-reward", fmtReward(b.mean_reward));
  setText(row, "td.cost", fmtBatchCost(b));
  setText(row, "td.started", fmtTime(b.started));
  setText(row, "td.finished", fmtTime(b.finished));
}

function liveBatches() {
  const source = new EventSource("/events");
  const table = document.getElementById("batches");
  let updates = 0;
  source.addEventListener("batches", (ev) => {
    const list = JSON.parse(ev.data);
    const rows = new Map();
    for (const row of document.querySelectorAll("tr[data-batch]")) rows.set(row.dataset.batch, row);
    for (const b of list) {
      let row = rows.get(b.name);
      if (!row && table) {
        row = batchRow(b);
        table.tBodies[0].appendChild(row);
        const none = document.getElementById("no-batches");
        if (none) none.hidden = true;
      }
      if (row) updateBatchRow(row, b);
      const head = document.getElementById("batch-name");
      if (head && head.dataset.batch === b.name) {
        setText(document, "#counts", countsText(b.counts));
        setText(document, "#mean-reward", fmtReward(b.mean_reward));
        setText(document, "#cost", fmtBatchCost(b));
        setText(document, "#finished", fmtTime(b.finished));
        setText(document, "#throughput", b.throughput == null ? "-" : b.throughput.toFixed(2));
      }
    }
    updates += 1;
    document.body.dataset.updates = String(updates);
  });
}

// The rollouts table is a window over the query's rows: the rows near the scroll
// position (at most WINDOW) between two spacer rows that stand for the rest; pages of
// PAGE rows are fetched by offset as the window moves, a few kept in a small cache.
function rolloutsTable() {
  const table = document.getElementById("rollouts");
  const form = document.getElementById("filters");
  const scroller = document.getElementById("rollouts-scroll");
  const body = table.tBodies[0];
  const PAGE = 200;
  const WINDOW = 300;
  const BEFORE = 100;
  const STEP = 50;
  const KEEP = 8;
  const state = { orderBy: "seq", desc: false, total: 0, generation: 0, rowH: 25, start: -1, end: -1 };
  let pages = new Map();
  const unpriced = new Set(JSON.parse(table.dataset.unpriced || "[]"));

  function params(offset) {
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(form)) p.set(k, String(v));
    p.set("order_by", state.orderBy);
    p.set("desc", state.desc ? "1" : "0");
    p.set("offset", String(offset));
    p.set("limit", String(PAGE));
    return p;
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }

  function row(r) {
    const tr = document.createElement("tr");
    tr.dataset.rollout = r.id;
    linkCell(tr, "rollout-link", table.dataset.base + encodeURIComponent(r.id), r.id).title = r.id;
    cell(tr, r.task ?? "");
    cell(tr, r.agent ?? "-");
    cell(tr, r.model ?? "-");
    cell(tr, r.status ?? "", "status status-" + (r.status ?? ""));
    cell(tr, fmtReward(r.reward), "num");
    cell(tr, unpriced.has(r.model) ? "unpriced" : fmtCost(r.cost), "num");
    cell(tr, fmtTime(r.ended_at));
    cell(tr, r.error_phase ? `${r.error_phase}: ${r.error_type ?? ""}` : "");
    return tr;
  }

  function spacer(rows) {
    const tr = document.createElement("tr");
    tr.className = "spacer";
    const td = document.createElement("td");
    td.colSpan = 9;
    td.style.height = `${rows * state.rowH}px`;
    tr.appendChild(td);
    return tr;
  }

  async function fetchPage(n, generation) {
    if (pages.has(n)) return pages.get(n);
    const resp = await fetch(table.dataset.api + "?" + params(n * PAGE), { credentials: "same-origin" });
    const data = await resp.json();
    if (generation !== state.generation) return null;
    if (!resp.ok) throw new Error(data.error || "error");
    state.total = data.total;
    pages.set(n, data.rows);
    while (pages.size > KEEP) pages.delete(pages.keys().next().value);
    return data.rows;
  }

  function windowAt() {
    const first = Math.floor(scroller.scrollTop / state.rowH);
    const start = Math.max(0, Math.floor((first - BEFORE) / STEP) * STEP);
    return [start, Math.min(state.total, start + WINDOW)];
  }

  function render(start, end) {
    const frag = document.createDocumentFragment();
    frag.appendChild(spacer(start));
    for (let i = start; i < end; i++) {
      const page = pages.get(Math.floor(i / PAGE));
      if (page && page[i % PAGE]) frag.appendChild(row(page[i % PAGE]));
    }
    frag.appendChild(spacer(state.total - end));
    body.replaceChildren(frag);
    const first = body.querySelector("tr[data-rollout]");
    if (first && first.getBoundingClientRect().height > 0) state.rowH = first.getBoundingClientRect().height;
    [state.start, state.end] = [start, end];
    const shown = body.querySelectorAll("tr[data-rollout]").length;
    document.getElementById("shown").textContent = state.total
      ? `${start + 1}–${end} of ${state.total}` : "0 of 0";
    document.body.dataset.loaded = String(shown);
    document.body.dataset.total = String(state.total);
  }

  async function show(force) {
    const generation = state.generation;
    const [start, end] = windowAt();
    if (!force && start === state.start && end === state.end) return;
    const need = [];
    for (let n = Math.floor(start / PAGE); n * PAGE < Math.max(end, 1); n++) need.push(n);
    try {
      await Promise.all(need.map((n) => fetchPage(n, generation)));
    } catch (err) {
      if (generation === state.generation) document.getElementById("shown").textContent = err.message;
      return;
    }
    if (generation !== state.generation) return;
    const [s2, e2] = windowAt();
    if (s2 !== start || e2 !== end) return show(false);
    render(start, end);
  }

  async function reset() {
    state.generation += 1;
    pages = new Map();
    state.start = state.end = -1;
    const generation = state.generation;
    try {
      await fetchPage(0, generation);
    } catch (err) {
      if (generation === state.generation) document.getElementById("shown").textContent = err.message;
      return;
    }
    if (generation !== state.generation) return;
    scroller.scrollTop = 0;
    await show(true);
  }

  for (const th of table.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      const col = th.dataset.sort;
      state.desc = state.orderBy === col ? !state.desc : false;
      state.orderBy = col;
      for (const other of table.querySelectorAll("th[data-sort]")) delete other.dataset.dir;
      th.dataset.dir = state.desc ? "desc" : "asc";
      reset();
    });
  }
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    reset();
  });
  form.addEventListener("change", () => reset());
  let queued = false;
  scroller.addEventListener("scroll", () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      show(false);
    });
  });
  reset();
}

// A running rollout's newest frame: its frame API polled each second until the rollout
// has ended; the image changes only when the frame does.
function liveFrame() {
  const figure = document.getElementById("live-frame");
  if (!figure) return;
  const img = figure.querySelector("img.live-image");
  const state = figure.querySelector(".live-state");
  async function poll() {
    let data;
    try {
      const resp = await fetch(figure.dataset.api, { credentials: "same-origin" });
      data = await resp.json();
      if (!resp.ok) throw new Error(data.error || "error");
    } catch (err) {
      state.textContent = "unavailable: " + err.message;
      setTimeout(poll, 2000);
      return;
    }
    if (data.frame && data.frame !== figure.dataset.frame) {
      figure.dataset.frame = data.frame;
      img.src = data.frame;
      img.hidden = false;
    }
    figure.dataset.frames = String(data.frames);
    const count = data.frames === 1 ? "1 frame" : `${data.frames} frames`;
    state.textContent = `${count} · ${data.status}` + (data.ended ? " (ended)" : "");
    if (data.ended) figure.dataset.ended = "1";
    else setTimeout(poll, 1000);
  }
  poll();
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "batches" || page === "batch") liveBatches();
  if (page === "batch") rolloutsTable();
  if (page === "rollout") liveFrame();
});
