// proctor view: live batch counts (SSE) and the windowed, sortable rollouts table.
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
const fmtTime = (v) => (v ? new Date(v * 1000).toISOString().replace("T", " ").slice(0, 19) : "-");

function setText(root, selector, text) {
  const el = root.querySelector(selector);
  if (el) el.textContent = text;
}

function liveBatches() {
  const source = new EventSource("/events");
  let updates = 0;
  source.addEventListener("batches", (ev) => {
    const list = JSON.parse(ev.data);
    for (const b of list) {
      for (const row of document.querySelectorAll("tr[data-batch]")) {
        if (row.dataset.batch !== b.name) continue;
        setText(row, "td.counts", countsText(b.counts));
        setText(row, "td.mean-reward", fmtReward(b.mean_reward));
        setText(row, "td.cost", fmtCost(b.cost));
      }
      const head = document.getElementById("batch-name");
      if (head && head.dataset.batch === b.name) {
        setText(document, "#counts", countsText(b.counts));
        setText(document, "#mean-reward", fmtReward(b.mean_reward));
        setText(document, "#cost", fmtCost(b.cost));
      }
    }
    updates += 1;
    document.body.dataset.updates = String(updates);
  });
}

function rolloutsTable() {
  const table = document.getElementById("rollouts");
  const form = document.getElementById("filters");
  const scroller = document.getElementById("rollouts-scroll");
  const body = table.tBodies[0];
  const state = { orderBy: "seq", desc: false, total: 0, loading: false, generation: 0 };
  const PAGE = 200;

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
    const td = document.createElement("td");
    const a = document.createElement("a");
    a.className = "rollout-link";
    a.href = table.dataset.base + encodeURIComponent(r.id);
    a.textContent = r.id;
    td.appendChild(a);
    tr.appendChild(td);
    cell(tr, r.task ?? "");
    cell(tr, r.model ?? "-");
    cell(tr, r.status ?? "", "status status-" + (r.status ?? ""));
    cell(tr, fmtReward(r.reward), "num");
    cell(tr, fmtCost(r.cost), "num");
    cell(tr, fmtTime(r.ended_at));
    cell(tr, r.error_phase ? `${r.error_phase}: ${r.error_type ?? ""}` : "");
    return tr;
  }

  async function load(reset) {
    if (reset) {
      state.generation += 1;
      body.replaceChildren();
      state.total = 0;
    } else if (state.loading || body.rows.length >= state.total) {
      return;
    }
    const generation = state.generation;
    state.loading = true;
    try {
      const resp = await fetch(table.dataset.api + "?" + params(body.rows.length), { credentials: "same-origin" });
      const data = await resp.json();
      if (generation !== state.generation) return;
      if (!resp.ok) {
        document.getElementById("shown").textContent = data.error || "error";
        return;
      }
      state.total = data.total;
      const frag = document.createDocumentFragment();
      for (const r of data.rows) frag.appendChild(row(r));
      body.appendChild(frag);
      document.getElementById("shown").textContent = `${body.rows.length} of ${data.total}`;
      document.body.dataset.loaded = String(body.rows.length);
    } finally {
      if (generation === state.generation) state.loading = false;
    }
    if (scroller.scrollHeight <= scroller.clientHeight + 50) load(false);
  }

  for (const th of table.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      const col = th.dataset.sort;
      state.desc = state.orderBy === col ? !state.desc : false;
      state.orderBy = col;
      for (const other of table.querySelectorAll("th[data-sort]")) delete other.dataset.dir;
      th.dataset.dir = state.desc ? "desc" : "asc";
      load(true);
    });
  }
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    load(true);
  });
  form.addEventListener("change", () => load(true));
  scroller.addEventListener("scroll", () => {
    if (scroller.scrollTop + scroller.clientHeight >= scroller.scrollHeight - 200) load(false);
  });
  load(true);
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "batches" || page === "batch") liveBatches();
  if (page === "batch") rolloutsTable();
});
