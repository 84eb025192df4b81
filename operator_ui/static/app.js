// The operator page: plain JS, no build step. Reads /api/*, sends the token on every change.
"use strict";

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const fmtLabel = (v) => (v === true ? '<span class="yes">success</span>' : v === false ? '<span class="no">failure</span>' : "—");

// Token: from #token=... in the address (printed by `pde ui`), remembered in this browser.
const hashToken = new URLSearchParams(location.hash.slice(1)).get("token");
if (hashToken) { localStorage.setItem("pde-token", hashToken); history.replaceState(null, "", location.pathname); }
const tokenInput = $("#token");
tokenInput.value = localStorage.getItem("pde-token") || "";
tokenInput.addEventListener("change", () => localStorage.setItem("pde-token", tokenInput.value.trim()));

let toastTimer = null;
function toast(msg) {
  const t = $("#toast"); t.textContent = msg; t.hidden = false;
  clearTimeout(toastTimer); toastTimer = setTimeout(() => { t.hidden = true; }, 5000);
}

async function api(path, opts = {}) {
  const headers = { "Content-Type": "application/json" };
  const tok = tokenInput.value.trim();
  if (tok) headers.Authorization = "Bearer " + tok;
  const res = await fetch(path, { ...opts, headers });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) { const msg = body.detail ? (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail)) : res.statusText; throw new Error(`${res.status}: ${msg}`); }
  return body;
}
const post = (path, data) => api(path, { method: "POST", body: JSON.stringify(data ?? {}) });
async function act(fn, okMsg) { try { const r = await fn(); if (okMsg) toast(okMsg); refreshAll(); return r; } catch (e) { toast(e.message); } }

// --- live view ---------------------------------------------------------------------------------
function liveCamera(name) {
  const img = $("#cam-" + name);
  const next = () => { img.src = `/api/cameras/${name}.jpg?t=${Date.now()}`; };
  img.onload = () => setTimeout(next, 80);
  img.onerror = () => setTimeout(next, 1000);
  next();
}
liveCamera("external"); liveCamera("wrist");

// --- now -------------------------------------------------------------------------------------
let current = { phase: null, episode: null };
async function refreshState() {
  const s = await api("/api/state");
  const loop = s.loop || {}; const ep = s.episode;
  current = { phase: loop.alive ? loop.phase : null, episode: ep };
  const phase = $("#phase");
  phase.textContent = loop.alive ? loop.phase : (loop.phase ? `not running (last: ${loop.phase})` : "not running");
  phase.className = "phase " + (loop.alive ? loop.phase : "stopped");
  $("#why").textContent = loop.why || loop.detail || "";
  $("#task").textContent = loop.task || "—";
  $("#prompt").textContent = loop.prompt || "—";
  $("#canonical").textContent = loop.canonical_prompt || (ep ? ep.canonical_prompt : "—");
  $("#episode-id").textContent = ep ? "#" + ep.id : "—";
  $("#episode-status").textContent = ep ? `${ep.status}${ep.success !== null ? " · " + (ep.success ? "success" : "failure") : ""}` : "";
  $("#last-error").textContent = loop.last_error || "";
  $("#start").disabled = current.phase !== "awaiting_start";
  $("#abort").disabled = current.phase !== "running";
  const canLabel = ep && ep.status === "awaiting_label";
  $("#label-success").disabled = !canLabel; $("#label-failure").disabled = !canLabel;
  $("#vlm").innerHTML = "VLM: " + (ep && ep.vlm_proposal !== null ? fmtLabel(ep.vlm_proposal) + (ep.vlm_reason ? ` <span class="muted">${esc(ep.vlm_reason)}</span>` : "") : "—");
}

function startEpisode() { if (!$("#start").disabled) act(() => post("/api/loop/start"), "episode started"); }
function labelCurrent(success) {
  const ep = current.episode;
  if (ep && ep.status === "awaiting_label") act(() => post(`/api/episodes/${ep.id}/label`, { success }), `episode ${ep.id} labelled ${success ? "success" : "failure"}`);
}
function estop() {
  act(async () => { const r = await post("/api/robot/estop", { reason: "operator pressed e-stop on the page" }); $("#estop").classList.toggle("latched", r.estopped); return r; }, "E-STOP sent");
}
$("#start").onclick = startEpisode;
$("#abort").onclick = () => act(() => post("/api/loop/abort"), "abort requested");
$("#label-success").onclick = () => labelCurrent(true);
$("#label-failure").onclick = () => labelCurrent(false);
$("#estop").onclick = estop;
$("#release").onclick = () => act(() => post("/api/robot/release"), "e-stop released");

document.addEventListener("keydown", (ev) => {
  if (ev.target instanceof HTMLInputElement) return;
  if (ev.code === "Space") { ev.preventDefault(); estop(); }
  else if (ev.key === "Enter") { ev.preventDefault(); startEpisode(); }
  else if (ev.key === "s" || ev.key === "S") labelCurrent(true);
  else if (ev.key === "f" || ev.key === "F") labelCurrent(false);
});

// --- history and detail -----------------------------------------------------------------------
async function refreshHistory() {
  const eps = await api("/api/episodes?limit=50");
  $("#history tbody").innerHTML = eps.map((e) => `<tr data-episode-id="${e.id}">
    <td>${e.id}</td><td>${esc(e.task)}</td><td>${esc(e.rollout_prompt)}</td><td>${e.stage}</td><td>v${e.policy_version}</td>
    <td title="${esc(e.abort_reason)}">${e.status}${e.abort_reason ? " ⚠" : ""}</td><td>${fmtLabel(e.success)}</td><td>${fmtLabel(e.vlm_proposal)}</td></tr>`).join("");
  for (const tr of document.querySelectorAll("#history tbody tr")) tr.onclick = () => showDetail(Number(tr.dataset.episodeId));
}

let detailId = null;
async function showDetail(id) {
  const e = await api(`/api/episodes/${id}`);
  const firstOpen = detailId !== id;
  detailId = id; $("#detail").hidden = false; $("#detail-id").textContent = "#" + id;
  $("#detail-meta").textContent = `${e.task} · "${e.rollout_prompt}" · ${e.stage} · policy v${e.policy_version} · ${e.status} · ${e.n_chunks} chunks` + (e.abort_reason ? ` · aborted: ${e.abort_reason}` : "");
  if (firstOpen) {
    $("#detail-videos").innerHTML = Object.entries(e.videos).map(([cam, url]) =>
      `<figure><video controls muted preload="auto" data-camera="${esc(cam)}" src="${url}"></video><figcaption>${esc(cam)}</figcaption></figure>`).join("") || '<p class="muted">no video (the episode did not end)</p>';
  }
  $("#detail-labels tbody").innerHTML = e.labels.map((l) => `<tr><td>${new Date(l.created_at).toLocaleString()}</td><td>${l.source}${l.authoritative ? "" : " (proposal)"}</td><td>${fmtLabel(l.success)}</td><td>${esc(l.reason)}</td></tr>`).join("");
  const canRelabel = e.status === "labelled" || e.status === "awaiting_label";
  $("#relabel-success").disabled = !canRelabel; $("#relabel-failure").disabled = !canRelabel;
  if (firstOpen) $("#detail").scrollIntoView({ behavior: "instant", block: "nearest" });
}
function relabel(success) {
  if (detailId === null) return;
  const id = detailId;
  act(async () => { const r = await post(`/api/episodes/${id}/relabel`, { success, reason: "relabelled on the page" }); await showDetail(id); return r; }, `episode ${id} relabelled`);
}
$("#relabel-success").onclick = () => relabel(true);
$("#relabel-failure").onclick = () => relabel(false);
$("#detail-close").onclick = () => { detailId = null; $("#detail").hidden = true; $("#detail-videos").innerHTML = ""; };

// --- pools and curves ---------------------------------------------------------------------------
async function refreshPools() {
  const tasks = await api("/api/tasks");
  const parts = await Promise.all(tasks.map(async (t) => {
    const ps = await api(`/api/tasks/${encodeURIComponent(t.name)}/prompts`);
    const rows = ps.map((p) => `<tr data-prompt-id="${p.id}"><td>${esc(p.text)}</td><td>${p.status}</td><td>${p.n_success}/${p.n_episodes}</td>
      <td>${p.success_rate === null ? "—" : Math.round(100 * p.success_rate) + "%"}</td><td class="muted">${esc(p.summary)}</td></tr>`).join("");
    return `<div class="pooltask"><h3>${esc(t.name)} <span class="muted">stage ${t.stage} · iteration ${t.iteration} · α ${t.alpha.toFixed(2)} · pool ${t.pool_size}</span></h3>
      <table><thead><tr><th>prompt</th><th>status</th><th>successes</th><th>rate</th><th>summary</th></tr></thead><tbody>${rows}</tbody></table></div>`;
  }));
  $("#pools").innerHTML = parts.join("") || '<p class="muted">no tasks yet (the loop creates them)</p>';
  const curves = await Promise.all(tasks.map(async (t) => [t.name, await api(`/api/tasks/${encodeURIComponent(t.name)}/curves`)]));
  $("#curves").innerHTML = curves.map(([name, c]) => `<h3>${esc(name)}</h3><div class="plots">
    ${plot("canonical-prompt success", c.canonical_success, 0, 1)}${plot("α", c.alpha, 0, 1)}${plot("pool size", c.pool_size, 0, null)}</div>`).join("");
}

function plot(title, pts, yMin, yMax) {
  const W = 300, H = 140, L = 34, R = 8, T = 18, B = 20;
  if (!pts.length) return `<svg class="plot" width="${W}" height="${H}"><text x="${L}" y="14">${esc(title)}</text><text x="${L}" y="70">no data yet</text></svg>`;
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const lo = yMin ?? Math.min(...ys), hi = yMax ?? Math.max(...ys, lo + 1);
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), sy = (y) => H - B - ((y - lo) / (hi - lo || 1)) * (H - T - B);
  const d = pts.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
  return `<svg class="plot" width="${W}" height="${H}" data-title="${esc(title)}" data-points="${pts.length}">
    <text x="${L}" y="12">${esc(title)} (last ${(+ys[ys.length - 1]).toFixed(2)})</text>
    <line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#ccd"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#ccd"/>
    <text x="2" y="${T + 8}">${(+hi).toFixed(2)}</text><text x="2" y="${H - B}">${(+lo).toFixed(2)}</text>
    <text x="${L}" y="${H - 4}">episode ${x0}</text><text x="${W - R - 60}" y="${H - 4}">${x1}</text>
    <path d="${d}" fill="none" stroke="#2456d6" stroke-width="2"/>
    ${pts.length <= 200 ? pts.map((p) => `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="2.5" fill="#2456d6"/>`).join("") : ""}</svg>`;
}

// --- health ----------------------------------------------------------------------------------
async function refreshHealth() {
  const h = await api("/api/health");
  $("#health").innerHTML = Object.entries(h.services).map(([name, s]) =>
    `<span class="pill ${s.ok ? "ok" : "down"}" data-service="${esc(name)}" title="${esc(s.detail)}">${esc(name)}${s.ok ? "" : " ✕"}</span>`).join("");
  const rs = h.services.robot_server || {};
  $("#estop").classList.toggle("latched", rs.estopped === true);
  $("#robot-info").textContent = rs.estopped ? "E-STOP LATCHED" : rs.detail || "";
  $("#robot-info").classList.toggle("error", rs.estopped === true);
}

// --- polling ---------------------------------------------------------------------------------
const every = (ms, fn) => { const run = () => fn().catch(() => {}).finally(() => setTimeout(run, ms)); run(); };
function refreshAll() { refreshState().catch(() => {}); refreshHistory().catch(() => {}); if (detailId !== null) showDetail(detailId).catch(() => {}); }
every(300, refreshState);
every(1500, refreshHistory);
every(1500, refreshHealth);
every(4000, refreshPools);
