// privfl board: polls the read-only JSON API and draws the page. No inline HTML from data:
// every value is set with textContent.
"use strict";

const POLL_MS = 2000;
const LEDGER_EVERY = 5; // polls
const COLOURS = ["#3a78b5", "#c0504d", "#9bbb59", "#8064a2", "#f79646"];
let selected = null;
let lastStatus = null;
let polls = 0;
const charts = {};

async function getJSON(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function row(cells, attrs) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(attrs || {})) tr.setAttribute(k, v);
  for (const cell of cells) tr.appendChild(cell instanceof Node ? cell : el("td", cell));
  return tr;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function fmt(value) {
  if (typeof value !== "number") return String(value);
  return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(4)));
}

function metricsText(metrics) {
  return Object.entries(metrics).map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
}

async function refreshRuns() {
  const runs = await getJSON("/api/runs");
  document.getElementById("runs-empty").hidden = runs.length > 0;
  fill(document.querySelector("#runs tbody"), runs.map((run) => {
    const status = el("td");
    status.appendChild(el("span", run.status, `status ${run.status}`));
    const tr = row([run.id, run.model, run.parties.join(", "), status, run.started, run.ended,
      metricsText(run.metrics)], { "data-run": run.id, "data-status": run.status });
    if (run.id === selected) tr.classList.add("selected");
    tr.addEventListener("click", () => { location.hash = `run=${encodeURIComponent(run.id)}`; });
    return tr;
  }));
  if (selected === null && runs.length > 0 && !location.hash) select(runs[0].id);
}

async function refreshLedger() {
  const ledger = await getJSON("/api/ledger");
  const note = document.getElementById("ledger-note");
  if (ledger.error) {
    note.textContent = ledger.error;
    return;
  }
  note.textContent = `policy ${ledger.policy}; ledger ${ledger.ledger}. ε per project at this ` +
    "site, summed over its runs (basic composition), as `privfl site budget` prints it.";
  fill(document.querySelector("#ledger-projects tbody"),
    Object.entries(ledger.projects).map(([name, p]) => row(
      [name || "(none)", fmt(p.max_epsilon), fmt(p.spent), fmt(p.left), p.runs],
      { "data-project": name })));
  fill(document.querySelector("#ledger-runs tbody"), ledger.runs.map((r) => row(
    [r.started, r.project || "(none)", r.session, r.party, r.role, fmt(r.epsilon), fmt(r.delta),
      r.kind, r.unit, r.assumptions])));
  fill(document.querySelector("#ledger-refused tbody"), ledger.refused.map((r) => row(
    [r.refused, r.session, r.party, r.reason])));
}

function select(id) {
  selected = id;
  lastStatus = null;
  for (const key of Object.keys(charts)) { charts[key].destroy(); delete charts[key]; }
  document.getElementById("charts").replaceChildren();
  document.getElementById("run").hidden = false;
  document.getElementById("run-id").textContent = id;
  refreshSelected();
}

// A run's answers arrive late when the reader picks another run meanwhile: each refresh
// draws only if its run is still the one selected.
async function refreshDetail(id) {
  const detail = await getJSON(`/api/runs/${encodeURIComponent(id)}`);
  if (id !== selected) return;
  const job = detail.job || {};
  document.getElementById("job-file").textContent = job.file || "(no kit/job.toml in this run)";
  document.getElementById("job").textContent = job.error || job.text || "";
  document.getElementById("fingerprint").textContent = job.fingerprint || "—";
  fill(document.querySelector("#audited-jobs tbody"),
    Object.entries(detail.audited_jobs).map(([party, fp]) => {
      const same = job.fingerprint && fp === job.fingerprint;
      const mark = job.fingerprint ? (same ? "matches the job file" : "differs") : "";
      return row([party, el("td", fp), el("td", mark, same ? "match" : "mismatch")]);
    }));
  const audit = detail.audit;
  const verdict = document.getElementById("audit-verdict");
  if (audit.ok === null) {
    verdict.textContent = audit.note;
    verdict.className = "";
  } else if (audit.ok) {
    verdict.textContent = `${audit.logs} logs verified, no findings`;
    verdict.className = "ok";
  } else {
    const n = audit.findings.length;
    const going = detail.status === "running" ? " (the run is still going: a message in flight " +
      "is not in its receiver's log yet)" : "";
    verdict.textContent = `${n} finding${n === 1 ? "" : "s"} in ${audit.logs} logs${going}`;
    verdict.className = "bad";
  }
  fill(document.getElementById("audit-findings"), audit.findings.map((f) => el("li", f)));
  document.getElementById("plots").replaceChildren(...detail.plots.map((p) => {
    const img = el("img");
    img.src = `/runs/${encodeURIComponent(id)}/files/${p}`;
    img.alt = p;
    img.title = p;
    return img;
  }));
}

async function refreshLive(id) {
  const live = await getJSON(`/api/runs/${encodeURIComponent(id)}/live`);
  if (id !== selected) return null;
  const status = document.getElementById("run-status");
  status.textContent = live.status;
  status.className = `status ${live.status}`;
  document.getElementById("run-reason").textContent = live.reason;
  const planned = live.planned ? ` / ${live.planned}` : "";
  const progress = document.getElementById("progress");
  progress.textContent = `${live.done}${planned} ${live.unit}s done`;
  progress.dataset.done = live.done;
  const share = live.planned ? Math.min(1, live.done / live.planned) : (live.status === "running" ? 0 : 1);
  document.getElementById("progress-bar").style.width = `${(100 * share).toFixed(1)}%`;
  fill(document.querySelector("#waits tbody"), Object.entries(live.parties).map(([party, line]) =>
    row([party, line.time, line.message], { "data-party": party })));
  drawCharts(live);
  drawReferences(live);
  return live.status;
}

function drawCharts(live) {
  const box = document.getElementById("charts");
  for (const [metric, values] of Object.entries(live.curves)) {
    const refs = live.references.filter((r) => r.metric === metric);
    const data = [live.steps, values, ...refs.map((r) => live.steps.map(() => r.value))];
    if (charts[metric] && charts[metric].series.length === data.length) {
      charts[metric].setData(data);
      continue;
    }
    if (charts[metric]) { charts[metric].destroy(); }
    let holder = document.getElementById(`chart-${metric}`);
    if (!holder) {
      holder = el("div", null, "chart");
      holder.id = `chart-${metric}`;
      holder.appendChild(el("h4", `${metric} per ${live.unit}`));
      box.appendChild(holder);
    }
    const series = [{ label: live.unit }, { label: "joint model", stroke: COLOURS[0], width: 2,
      points: { show: true } }, ...refs.map((r, i) => ({ label: r.name, stroke: COLOURS[i + 1],
      dash: [6, 4], width: 1.5 }))];
    charts[metric] = new uPlot({ width: 460, height: 240, series,
      scales: { x: { time: false } },
      axes: [{ label: live.unit, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500] }, {}] }, data, holder);
  }
}

function drawReferences(live) {
  const last = (metric) => {
    const values = live.curves[metric] || [];
    return values.length ? fmt(values[values.length - 1]) : "";
  };
  document.getElementById("references-empty").hidden = live.references.length > 0;
  fill(document.querySelector("#references tbody"), live.references.map((r) =>
    row([r.name, r.metric, fmt(r.value), last(r.metric), r.note || ""])));
}

async function refreshSelected() {
  const id = selected;
  if (id === null) return;
  const status = await refreshLive(id);
  if (status === null) return;
  // the audit of a running job changes as its logs grow: read it again now and then
  if (status !== lastStatus || (status === "running" && polls % LEDGER_EVERY === 0)) {
    lastStatus = status;
    await refreshDetail(id);
  }
}

async function tick() {
  try {
    await refreshRuns();
    await refreshSelected();
    if (polls % LEDGER_EVERY === 0) await refreshLedger();
    polls += 1;
    document.getElementById("last-update").textContent =
      `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    document.getElementById("last-update").textContent = `update failed: ${error.message}`;
  }
  setTimeout(tick, POLL_MS);
}

function fromHash() {
  const match = location.hash.match(/^#run=(.+)$/);
  if (match) select(decodeURIComponent(match[1]));
}

window.addEventListener("hashchange", fromHash);
fromHash();
tick();
