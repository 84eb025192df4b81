// The operator page: plain JS, no build step. Reads /api/*, sends the token on every change.
"use strict";

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const fmtLabel = (v) => (v === true ? '<span class="yes">success</span>' : v === false ? '<span class="no">failure</span>' : "—");

// Token: from #token=... in the address (printed by `pde ui`), remembered in this browser. It is
// checked on load, when edited, every TOKEN_CHECK_MS and after any 401/403, so a wrong or missing
// token shows at once with how to fix it, not on the first action (or e-stop release) that fails.
const hashToken = new URLSearchParams(location.hash.slice(1)).get("token");
if (hashToken) history.replaceState(null, "", location.pathname);
const tokenInput = $("#token");
tokenInput.value = localStorage.getItem("pde-token") || "";
const TOKEN_CHECK_MS = 10000;
const TOKEN_FIX = "Open the address `pde ui` printed at start-up (it ends in #token=…), or paste the token it printed " +
  "(or PDE_UI_TOKEN) into the token field. Watching works without it; labels, start and e-stop release need it.";
async function tokenWorks(tok) {
  try { await api("/api/token/check", { token: tok }); return true; }
  catch (e) { if (e.status === 401 || e.status === 403) return false; throw e; }
}
async function checkToken() {
  const tok = tokenInput.value.trim();
  let ok;
  try { ok = tok !== "" && await tokenWorks(tok); } catch (e) { return; }  // server down: the banner says so
  $("#token-banner").hidden = ok;
  tokenInput.classList.toggle("bad", !ok);
  $("#token-fix").textContent = TOKEN_FIX;
  if (!ok) $("#token-problem").textContent = tok === "" ? "No token: actions are refused." : "The token is wrong (was `pde ui` restarted with a new one?): actions are refused.";
}
async function adoptHashToken() {
  const saved = tokenInput.value.trim();
  if (hashToken && hashToken !== saved) {
    let linkOk = true, savedOk = false;
    try { linkOk = await tokenWorks(hashToken); savedOk = saved !== "" && !linkOk && await tokenWorks(saved); } catch (e) { /* keep the link's */ }
    if (linkOk || !savedOk) { tokenInput.value = hashToken; localStorage.setItem("pde-token", hashToken); }
    else toast("the token in the link is wrong; kept the token saved in this browser, which works");
  }
  await checkToken();
  setInterval(checkToken, TOKEN_CHECK_MS);
}
tokenInput.addEventListener("change", () => { localStorage.setItem("pde-token", tokenInput.value.trim()); checkToken(); });

let toastTimer = null;
function toast(msg) {
  const t = $("#toast"); t.textContent = msg; t.hidden = false;
  clearTimeout(toastTimer); toastTimer = setTimeout(() => { t.hidden = true; }, 5000);
}

// --- connection to the page's server -----------------------------------------------------------
// Any HTTP answer proves the server is up; no answer for CONN_LOST_MS shows the banner, greys the
// pills and disables every action (the page must never look healthy while it is blind).
const CONN_LOST_MS = 2000;
const REQUEST_TIMEOUT_MS = 2500;
let lastAnswerMs = performance.now();
let connected = true;
async function api(path, opts = {}) {
  const headers = { "Content-Type": "application/json" };
  const tok = opts.token ?? tokenInput.value.trim();
  if (tok) headers.Authorization = "Bearer " + tok;
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), REQUEST_TIMEOUT_MS);
  let res;
  try { res = await fetch(path, { method: opts.method, body: opts.body, headers, signal: ctrl.signal }); }
  catch (e) { throw new Error(`no answer from the page's server (${e.name === "AbortError" ? "timed out" : "connection refused"}): nothing was done`); }
  finally { clearTimeout(timer); }
  lastAnswerMs = performance.now();
  if (!connected) setConnected(true);
  const body = await res.json().catch(() => ({}));
  if (!res.ok) { const msg = body.detail ? (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail)) : res.statusText; const err = new Error(`${res.status}: ${msg}`); err.status = res.status; throw err; }
  return body;
}
const post = (path, data) => api(path, { method: "POST", body: JSON.stringify(data ?? {}) });
async function act(fn, okMsg) {
  try { const r = await fn(); if (okMsg) toast(okMsg); refreshAll(); return r; }
  catch (e) { toast(e.message); if (e.status === 401 || e.status === 403) checkToken(); }
}

function setConnected(ok) {
  connected = ok;
  $("#conn-banner").hidden = ok;
  document.body.classList.toggle("disconnected", !ok);
  for (const p of document.querySelectorAll(".pill")) { p.classList.remove("ok", "down"); p.classList.add("unknown"); }
  updateButtons();
  updateCues();
}
setInterval(() => { if (connected && performance.now() - lastAnswerMs > CONN_LOST_MS) setConnected(false); }, 250);

// --- live view ---------------------------------------------------------------------------------
// Frames are fetched (not <img src>) to read their age, which the server measures; the age keeps
// growing here while no newer frame arrives, so a dead robot server or page server shows as stale.
let frameStaleS = 1.0;
const frames = {};
function liveCamera(name) {
  const img = $("#cam-" + name);
  const f = frames[name] = { ageS: null, atMs: 0 };
  const next = (delayMs) => setTimeout(load, delayMs);
  async function load() {
    try {
      const ctrl = new AbortController(); const timer = setTimeout(() => ctrl.abort(), REQUEST_TIMEOUT_MS);
      const res = await fetch(`/api/cameras/${name}.jpg?t=${Date.now()}`, { cache: "no-store", signal: ctrl.signal }).finally(() => clearTimeout(timer));
      lastAnswerMs = performance.now();
      if (!res.ok) throw new Error(String(res.status));
      const age = Number(res.headers.get("X-Frame-Age-S"));
      const url = URL.createObjectURL(await res.blob());
      const old = img.src; img.src = url; if (old.startsWith("blob:")) URL.revokeObjectURL(old);
      f.ageS = Number.isFinite(age) ? age : null; f.atMs = performance.now();
      next(80);
    } catch (e) { next(500); }
  }
  load();
}
function frameAgeS(name) { const f = frames[name]; return f.ageS === null ? null : f.ageS + (performance.now() - f.atMs) / 1000; }
function showStaleness() {
  for (const name of Object.keys(frames)) {
    const age = frameAgeS(name), badge = $("#stale-" + name);
    const stale = age === null || age > frameStaleS;
    badge.hidden = !stale;
    badge.textContent = age === null ? "no frame" : `STALE · ${age < 100 ? age.toFixed(1) : Math.round(age)} s old`;
    $("#cam-" + name).classList.toggle("stale", stale);
  }
}
liveCamera("external"); liveCamera("wrist");
// Click a camera to enlarge it (again to shrink).
for (const img of document.querySelectorAll("#live .cams img")) img.onclick = () => img.closest("figure").classList.toggle("big");
setInterval(showStaleness, 200);

// --- now -------------------------------------------------------------------------------------
// S/F and the label buttons label `awaiting.id`, the episode shown in the "awaiting label" box
// (with its video): never "whatever is current" on the server when the key arrives.
let current = { phase: null, episode: null, person: null, practice: false };
// A practice episode (no row: nothing of it is stored) has a negative id; say what it is instead.
const episodeName = (ep) => (ep.practice ? "the PRACTICE episode (nothing is recorded)" : `episode #${ep.id}`);
let awaiting = null;
let vlmState = { supervisor_running: false, available: false, proposer: "" };
let autoLabel = false;
// The running episode: its chunks (counted by the page's server from the robot server's
// observations) and the time since it started; the buttons that end it.
const fmtClock = (s) => `${Math.floor(s / 60)}:${String(Math.floor(s % 60)).padStart(2, "0")}`;
function showRunning(r) {
  $("#takeover").hidden = !r;
  if (!r) return;
  $("#running-info").textContent = `${r.practice ? "PRACTICE episode (nothing is recorded)" : `episode #${r.episode_id}`} · ${r.chunks === null ? "chunks: — (no observation of it from the robot server)" : `${r.chunks} chunk${r.chunks === 1 ? "" : "s"}`} · ${fmtClock(r.elapsed_s)}`;
  $("#running-info").dataset.chunks = r.chunks === null ? "" : String(r.chunks);
}
async function refreshState() {
  const s = await api("/api/state");
  frameStaleS = s.frame_stale_s;
  undoMs = 1000 * s.label_undo_s;
  const loop = s.loop || {}; const ep = s.episode || s.practice_episode;
  current = { phase: loop.alive ? loop.phase : null, episode: ep, person: loop.alive ? loop.person : null, practice: !!(loop.alive && loop.practice) };
  const phase = $("#phase");
  phase.textContent = loop.alive ? loop.phase : (loop.phase ? `not running (last: ${loop.phase})` : "not running");
  phase.className = "phase " + (loop.alive ? loop.phase : "stopped");
  $("#why").textContent = loop.why || loop.detail || "";
  $("#task").textContent = loop.task || "—";
  $("#prompt").textContent = loop.prompt || "—";
  $("#canonical").textContent = loop.canonical_prompt || (ep ? ep.canonical_prompt : "—");
  $("#episode-id").textContent = ep ? (ep.practice ? "practice" : "#" + ep.id) : "—";
  $("#episode-status").textContent = !ep ? "" : ep.practice ? "nothing is recorded" : `${ep.status}${ep.success !== null ? " · " + (ep.success ? "success" : "failure") : ""}`;
  $("#last-error").textContent = operatorText(loop.last_error || "");
  autoLabel = !!(loop.alive && loop.auto_label);
  showRunning(s.running);
  document.body.classList.toggle("awaiting-start", current.phase === "awaiting_start" && !(loop.alive && loop.auto_start));
  vlmState = s.vlm;
  showAwaiting(s.awaiting_label);
  $("#auto-start-note").hidden = !(loop.alive && loop.auto_start);
  showResetGuide(current.phase === "awaiting_start" ? loop.task : null);
  $("#start").hidden = !!(loop.alive && loop.auto_start);
  updateButtons();
  updateCues(loop);
}

function showAwaiting(ep) {
  const box = $("#awaiting");
  const changed = (awaiting ? awaiting.id : null) !== (ep ? ep.id : null);
  awaiting = ep;
  box.hidden = !ep;
  document.body.classList.toggle("awaiting-label", !!ep);
  box.dataset.episodeId = ep ? ep.id : "";
  if (!ep) { if (changed) $("#awaiting-video").innerHTML = ""; return; }
  $("#awaiting-id").textContent = "#" + ep.id;
  $("#awaiting-meta").textContent = `${ep.task} · "${ep.rollout_prompt}" · ${ep.n_chunks} chunks`;
  for (const b of document.querySelectorAll("#awaiting .labelbar button")) b.dataset.episodeId = ep.id;
  $("#label-success .for").textContent = $("#label-failure .for").textContent = "#" + ep.id;
  $("#vlm").innerHTML = "VLM: " + (ep.vlm_proposal !== null ? fmtLabel(ep.vlm_proposal) + (ep.vlm_reason ? ` <span class="muted">${esc(ep.vlm_reason)}</span>` : "")
    : !vlmState.supervisor_running ? '<span class="muted">none (supervisor not running)</span>'
    : vlmState.proposer === "offline" ? '<span class="muted">no VLM (offline proposer)</span>'
    : vlmState.available ? '<span class="muted">judging…</span>' : '<span class="muted">none (no VLM configured)</span>');
  if (changed) {
    // Opens on the last frame (what the operator judges); the controls replay the episode.
    const cam = ep.videos.external ? "external" : Object.keys(ep.videos)[0];
    $("#awaiting-video").innerHTML = cam ? `<video controls muted preload="auto" data-camera="${esc(cam)}" src="${ep.videos[cam]}"></video>` : '<p class="muted">no video</p>';
    const v = $("#awaiting-video video");
    if (v) v.addEventListener("loadedmetadata", () => { if (Number.isFinite(v.duration)) v.currentTime = Math.max(0, v.duration - 0.05); }, { once: true });
  }
}

// While the loop waits for Start: the lab's written reset steps for the task and the start scene of
// its last episode (first frame of that episode's video), refreshed when the task changes.
let guideTask = null;
async function showResetGuide(task) {
  $("#reset-guide").hidden = !task;
  if (!task) { guideTask = null; return; }
  if (task === guideTask) return;
  const g = await api(`/api/tasks/${encodeURIComponent(task)}/reset-guide`);
  guideTask = task;
  $("#reset-steps").textContent = g.instructions || `No written steps for ${task} yet (reset_instructions of [tasks.${task}] in ${g.instructions_file || "a tasks file named by PDE_TASKS_FILE"}).`;
  $("#reset-ref").innerHTML = g.reference_video
    ? `<video muted preload="auto" src="${g.reference_video}"></video><figcaption>start scene of episode #${g.reference_episode_id}</figcaption>` : "";
}

// Why Start cannot be pressed now ("" when it can); the server refuses the same cases.
let startInFlight = false;
function startBlocker() {
  if (!connected) return "no connection to the page's server";
  if (current.phase !== "awaiting_start") return "";  // the phase says what the loop does
  if ($("#estop").classList.contains("latched")) return "E-STOP latched: release it first";
  if (practice !== current.practice) return practice ? "practice: the loop resets the scene for a practice episode first…" : "practice ended: the loop resets the scene for a recorded episode first…";
  if (paused) return "run paused: press “resume run” first";
  if (startInFlight) return "waiting for the loop to take the start…";
  return null;
}
function updateButtons() {
  const blocker = startBlocker();
  $("#start").disabled = blocker !== null;
  $("#start-why").textContent = blocker || "";
  $("#abort").disabled = !connected || current.phase !== "running";
  for (const id of ["#end-success", "#end-failure"]) $(id).disabled = !connected || current.phase !== "running" || endSent;
  $("#take-control").hidden = !current.person;  // only when the loop has a person source
  $("#take-control").disabled = !connected || current.phase !== "running" || takeSent;
  $("#home").disabled = !connected || ["starting", "resetting", "running"].includes(current.phase) || $("#estop").classList.contains("latched") || homing;
  $("#practice").disabled = !connected; $("#practice-end").disabled = !connected;
  $("#release-banner").disabled = !connected;
  const canLabel = connected && awaiting !== null && pending === null && !outboxHolds(awaiting.id);
  $("#discard-awaiting").disabled = !canLabel;
  $("#label-success").disabled = !canLabel; $("#label-failure").disabled = !canLabel;
  $("#release").disabled = !connected;
  $("#pause").disabled = !connected;
  for (const b of document.querySelectorAll("#detail .labelbar button")) b.disabled = !connected || !detailCanRelabel || pending !== null;
  for (const b of document.querySelectorAll("#detail .reasonbar button")) if (b.id !== "discard") b.disabled = !connected;
}

// Errors from the services are written for developers; say what the operator does about them.
const OPERATOR_HINTS = [
  [/e-?stop (is )?latched/i, "The E-STOP is latched: when the area is clear, press “release e-stop” at the top (needs the token)."],
  [/no observation|not publishing|timed? ?out|no reply/i, "The robot server does not answer: check that `pde robot-server` runs and the robot is powered."],
  [/PPO update .* failed/i, "Training failed; episodes go on with the current policy. Tell whoever runs the learner."],
];
// The robot client's hints about link keys are for whoever set the keys up (they are in the
// services' logs), not for the operator.
const LINK_KEY_HINT = / \((?:a server )?with link keys[^)]*\)/g;
function operatorText(err) {
  if (!err) return "";
  err = err.replace(LINK_KEY_HINT, "");
  const hint = OPERATOR_HINTS.find(([re]) => re.test(err));
  return hint ? `${hint[1]} (${err.replace(/call release_estop\(\)/g, "release it on the page")})` : err;
}

// Cues when the operator is needed: tab title, favicon colour, optional sound and notification.
let lastNeed = "";
function updateCues(loop) {
  const need = awaiting ? `label #${awaiting.id}` : current.phase === "awaiting_start" ? "reset the scene, press Start" : "";
  const state = !connected ? "lost" : $("#estop").classList.contains("latched") ? "estop" : need ? "need" : problems.length ? "down" : current.phase === "running" ? "run" : "idle";
  const downTitle = state === "down" ? `(!) ${problems.map((p) => p.title.toLowerCase()).join(", ")} ` : "";
  document.title = (need ? `(!) ${need} — ` : state === "down" ? downTitle : state === "lost" ? "(connection lost) " : state === "estop" ? "(E-STOP) " : "") + "PDE operator";
  const colour = { lost: "#777777", estop: "#dd0000", down: "#b3261e", need: "#ffb700", run: "#1f7a3a", idle: "#2456d6" }[state];
  const icon = $("#favicon");
  icon.dataset.state = state;
  icon.href = "data:image/svg+xml," + encodeURIComponent(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="7" fill="${colour}"/></svg>`);
  if (need && need !== lastNeed) {
    if ($("#cue-sound").checked) beep();
    if ($("#cue-notify").checked && window.Notification && Notification.permission === "granted") new Notification("PDE operator", { body: need });
  }
  lastNeed = need;
}
function beep() {
  try { const ctx = new AudioContext(), o = ctx.createOscillator(); o.frequency.value = 880; o.connect(ctx.destination); o.start(); o.stop(ctx.currentTime + 0.15); } catch (e) { /* no audio */ }
}
$("#cue-notify").onchange = () => { if ($("#cue-notify").checked && window.Notification) Notification.requestPermission(); };

// --- run progress and pause -------------------------------------------------------------------
let paused = false;
let practice = false;
const fmtS = (s) => (s === null || s === undefined ? "—" : s < 90 ? `${Math.round(s)} s` : `${Math.round(s / 60)} min`);
async function refreshProgress() {
  const r = await api("/api/run");
  paused = r.paused;
  practice = r.practice;
  const stages = Object.entries(r.stages).map(([t, st]) => `${esc(t)}: <b>${st}</b>`).join(", ") || "—";
  const at = (s) => (s === null ? "" : new Date(Date.now() + 1000 * s).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
  const target = r.episodes_target === null ? `<b>${r.episodes_today}</b>`
    : `<b>${r.episodes_today}/${r.episodes_target}</b>${r.target_eta_s === null ? "" : r.target_eta_s === 0 ? " (target reached)" : ` (target ~${at(r.target_eta_s)})`}`;
  const update = r.update_episodes === null ? "—"
    : `in ${r.update_episodes_max === null ? "" : "at least "}<b>${r.update_episodes}</b>${r.update_episodes_max === null ? "" : `–${r.update_episodes_max}`} episodes` +
      (r.update_eta_s === null ? "" : ` (ETA ${fmtS(r.update_eta_s)}${r.update_eta_max_s === null ? "" : `–${fmtS(r.update_eta_max_s)}`})`);
  $("#progress").innerHTML = `<span>stage ${stages}</span><span id="episodes-done">episodes today ${target}</span>
    <span>per episode <b>${fmtS(r.episode_s)}</b></span><span id="cycle" title="start to start of recent episodes: reset, Start and label included">per cycle <b>${fmtS(r.cycle_s)}</b></span>
    <span id="ppo-eta" title="${esc(r.update_why)}">next PPO update ${update}</span>
    ${r.training ? '<span class="badge training">PPO update running</span>' : ""}${r.paused && !r.practice ? '<span class="badge paused">PAUSED</span>' : ""}
    ${r.auto_label ? '<span class="badge">auto-label</span>' : ""}`;
  $("#practice-banner").hidden = !r.practice;
  $("#practice").hidden = r.practice;
  $("#pause").textContent = r.paused ? "resume run" : "pause run";
  updateButtons();
}
$("#pause").onclick = () => act(async () => { const r = await post("/api/run/pause", { paused: !paused }); paused = r.paused; updateButtons(); return r; },
  paused ? "run resumed" : "pausing: the loop finishes the episode in hand, then waits");
// Practice: the loop runs practice episodes (Start, the policy, take control, end now) and stores
// none of them; the page's server refuses labels and discards; the arm's own buttons stay real.
$("#practice").onclick = () => act(async () => { const r = await post("/api/run/pause", { paused: false, practice: true }); practice = r.practice; refreshProgress(); return r; },
  "practice: after the episode in hand, Start runs practice episodes that record nothing; E-STOP, release and home arm are real");
$("#practice-end").onclick = () => act(async () => { const r = await post("/api/run/pause", { paused: false, practice: false }); practice = false; refreshProgress(); return r; },
  "practice over: the next episode is recorded");

// --- take over: end the running episode now, home the arm ---------------------------------------
// "End now" keeps the episode (abort throws it away): the loop stores what ran and the operator's
// verdict waits in the outbox until the episode has ended, then goes as its label.
let endSent = false;
function endNow(success) {
  const ep = current.episode;
  if (current.phase !== "running" || !ep || endSent) return;
  endSent = true; updateButtons();
  act(async () => {
    const r = await post("/api/loop/end", { success });
    if (!autoLabel && !ep.practice) saveOutbox([...loadOutbox(), { key: `${Date.now()}-end-${ep.id}`, kind: "label", episodeId: ep.id, success, operator: operatorInput.value.trim(),
      reason: "ended early on the page", createdMs: Date.now(), dueMs: 0, error: "", failed: false, waitForEnd: true }]);
    return r;
  }, `ending ${episodeName(ep)} now — ${labelWord(success)}: the arm holds` + (ep.practice ? "" : autoLabel ? "; the simulator labels it (auto-label)" : "; the label goes once it is stored"))
    .finally(() => setTimeout(() => { endSent = false; updateButtons(); }, 2000));
}
// "Take control": the run's person source (PDE_TELEOP_PERSON) drives until its take ends, then the
// policy goes on; the episode keeps both (the person's rows are left out of PPO).
let takeSent = false;
$("#take-control").onclick = () => {
  const ep = current.episode;
  if (current.phase !== "running" || !ep || !current.person || takeSent) return;
  takeSent = true; updateButtons();
  act(async () => {
    const r = await post("/api/loop/take-control", {});
    if (current.person === "page") { teleop.takeoverEpisode = ep.id; refreshTeleop(); }  // this page's keys drive
    return r;
  }, `${episodeName(ep)}: take control with the ${current.person} — the policy hands over at the next tick`)
    .finally(() => setTimeout(() => { takeSent = false; updateButtons(); }, 2000));
};
$("#end-success").onclick = () => endNow(true);
$("#end-failure").onclick = () => endNow(false);
// Homing moves the arm: a second click within 5 s confirms, as for the release.
let homeArmed = null, homing = false;
function disarmHome() { clearTimeout(homeArmed); homeArmed = null; $("#home").textContent = "home arm"; $("#home").classList.remove("confirm"); }
$("#home").onclick = () => {
  if (!homeArmed) { $("#home").textContent = "STAND CLEAR — click again to home"; $("#home").classList.add("confirm"); homeArmed = setTimeout(disarmHome, 5000); return; }
  disarmHome();
  homing = true; updateButtons(); toast("homing the arm…");
  act(() => post("/api/robot/home"), "arm homed").finally(() => { homing = false; updateButtons(); });
};

// Releasing the e-stop lets the loop move the arm (reset, homing): a second click within 5 s confirms.
let releaseArmed = null;
function releaseClicked() {
  if (!releaseArmed) {
    for (const b of [$("#release"), $("#release-banner")]) { b.textContent = "STAND CLEAR — click again to release"; b.classList.add("confirm"); }
    releaseArmed = setTimeout(disarmRelease, 5000);
    return;
  }
  disarmRelease();
  act(() => post("/api/robot/release"), "e-stop released: the arm may move now");
}
function disarmRelease() {
  clearTimeout(releaseArmed); releaseArmed = null;
  for (const b of [$("#release"), $("#release-banner")]) { b.textContent = "release e-stop"; b.classList.remove("confirm"); }
}

// The start is an intent the loop takes (or refuses) a moment later: the toast reports what the loop
// did with this very intent (its state's `last_start`), never "started" before it has.
const START_ANSWER_MS = 15000;
async function startEpisode() {
  if (startBlocker() !== null) return;
  startInFlight = true; updateButtons();
  try {
    const r = await post("/api/loop/start");
    toast("start sent: waiting for the loop…");
    const deadline = performance.now() + START_ANSWER_MS;
    for (;;) {
      const s = await api("/api/state");
      const last = s.loop && s.loop.last_start;
      if (last && last.intent_id === r.intent_id) {
        toast(last.refused ? "NOT STARTED — " + operatorText(last.refused) : last.episode_id < 0 ? "PRACTICE episode started — nothing is recorded" : `episode #${last.episode_id} started`);
        break;
      }
      if (!s.loop || !s.loop.alive) { toast("NOT STARTED — the episode loop stopped before it took the start: start `pde learner run` (compose service learner)"); break; }
      if (performance.now() > deadline) { toast(`NOT STARTED yet — the loop has not taken the start in ${START_ANSWER_MS / 1000} s (it is ${s.loop.phase}); it still may`); break; }
      await new Promise((ok) => setTimeout(ok, 200));
    }
  } catch (e) { toast(e.message); if (e.status === 401 || e.status === 403) checkToken(); }
  finally { startInFlight = false; refreshAll(); }
}
// --- labels, relabels and discards: held for undo, never lost ------------------------------------
// Each one is an entry in an outbox kept in this browser's localStorage: held UNDO_MS (the loop
// moves the arm as soon as it has a label; U or Undo takes it back), then sent. One the page's
// server did not answer stays in the outbox, shown in a banner, and is sent again every second
// (and on the next load of the page, even after the browser was closed) until the server takes it.
// One the server refused (e.g. labelled meanwhile in another tab) stays named in the banner until
// the operator re-sends or drops it. Labels carry the operator's name, set once per browser.
const OUTBOX_KEY = "pde-outbox";
const operatorInput = $("#operator");
operatorInput.value = localStorage.getItem("pde-operator") || "";
operatorInput.addEventListener("change", () => { localStorage.setItem("pde-operator", operatorInput.value.trim()); showOperator(); });
function showOperator() { operatorInput.classList.toggle("bad", operatorInput.value.trim() === ""); }
showOperator();
let undoMs = 3000;  // UISettings.label_undo_s, from /api/state
let pending = null;  // the outbox entry in its undo window: { key, timer }
const loadOutbox = () => { try { return JSON.parse(localStorage.getItem(OUTBOX_KEY) || "[]"); } catch (e) { return []; } };
const saveOutbox = (list) => { localStorage.setItem(OUTBOX_KEY, JSON.stringify(list)); showOutbox(); };
const updateEntry = (key, fields) => saveOutbox(loadOutbox().map((x) => (x.key === key ? { ...x, ...fields } : x)));
const dropEntry = (key) => saveOutbox(loadOutbox().filter((x) => x.key !== key));
const labelWord = (success) => (success ? "success" : "failure");
function describe(x) {
  const who = x.operator ? ` by ${x.operator}` : "";
  const why = x.reason ? ` (${x.reason})` : "";
  if (x.kind === "discard") return `discard of #${x.episodeId}${why}`;
  return `${x.kind === "relabel" ? "relabel" : "label"} #${x.episodeId} ${labelWord(x.success)}${why}${who}`;
}
// Holds one action for undo; `warn` (PPO already used the label) is repeated in the held text.
function hold(kind, episodeId, fields, warn = "") {
  if (practice) { toast(`practice: that would have been the ${describe({ kind, episodeId, ...fields })}; nothing was sent`); return; }
  if (pending) { toast(`one change at a time: ${describe(loadOutbox().find((x) => x.key === pending.key) || {})} is still held (Undo or send now)`); return; }
  const x = { key: `${Date.now()}-${Math.random().toString(36).slice(2)}`, kind, episodeId, operator: operatorInput.value.trim(), reason: "", ...fields, createdMs: Date.now(), dueMs: Date.now() + undoMs, error: "", failed: false };
  saveOutbox([...loadOutbox(), x]);
  pending = { key: x.key, timer: setTimeout(sendPending, undoMs) };
  const then = kind === "label" ? " — then the arm resets: stand clear" : "";
  const what = kind === "label" ? `Labelling #${episodeId} ${labelWord(x.success)}${x.reason ? ` (${x.reason})` : ""}`
    : kind === "relabel" ? `Relabelling #${episodeId} ${labelWord(x.success)}` : `Discarding #${episodeId} (${x.reason})`;
  $("#pending-text").textContent = `${what} in ${undoMs / 1000} s${then}${x.operator ? "" : " · no name set: labels say who gave them, set yours at the top"}${warn ? " · " + warn : ""}`;
  $("#pending").hidden = false;
  updateButtons();
}
function labelAwaiting(success, episodeId) {
  if (!awaiting || !connected || episodeId !== awaiting.id || pending || outboxHolds(episodeId)) return;
  hold("label", episodeId, { success, reason: $("#label-reason").value.trim() });
}
function sendPending() {
  const p = pending; if (!p) return;
  clearTimeout(p.timer); pending = null; $("#pending").hidden = true;
  updateEntry(p.key, { dueMs: 0 });
  $("#label-reason").value = "";
  updateButtons();
  flushOutbox();
}
function undoPending() {
  if (!pending) return;
  clearTimeout(pending.timer);
  const x = loadOutbox().find((e) => e.key === pending.key);
  dropEntry(pending.key);
  toast(`${x ? describe(x) : "change"} undone: nothing was sent`);
  pending = null; $("#pending").hidden = true; updateButtons();
}
// An outbox entry still to be sent for this episode (its label buttons stay disabled meanwhile).
const outboxHolds = (episodeId) => loadOutbox().some((x) => x.episodeId === episodeId);
const ENDPOINT = { label: "label", relabel: "relabel", discard: "discard" };
const entryBody = (x) => (x.kind === "discard" ? { reason: x.reason } : { success: x.success, reason: x.reason, operator: x.operator });
// A label or discard that may have reached the server already (sent as the page closed) is done
// when the episode says so; the server's 409 alone cannot tell that from a real conflict.
async function alreadyDone(x) {
  const e = await api(`/api/episodes/${x.episodeId}`);
  return x.kind === "discard" ? e.status === "discarded" : x.kind === "label" && e.status === "labelled" && e.success === x.success;
}
// Every tab of the page flushes the same outbox: an entry is sent once due (another tab's held
// label waits out its undo window there) and claimed first, so two tabs do not both send it.
const TAB = Math.random().toString(36).slice(2);
const CLAIM_MS = 5000;
function claim(key) {
  const x = loadOutbox().find((e) => e.key === key);
  if (!x || (x.claimTab && x.claimTab !== TAB && Date.now() - x.claimMs < CLAIM_MS)) return false;
  updateEntry(key, { claimTab: TAB, claimMs: Date.now() });
  return true;
}
let flushing = false;
async function flushOutbox() {
  if (flushing) return;
  flushing = true;
  try {
    for (const x of loadOutbox()) {
      if ((pending && x.key === pending.key) || x.failed || Date.now() < (x.dueMs || 0) || !claim(x.key)) continue;
      if (x.waitForEnd) {  // "end now": its label goes once the loop has stored the episode
        let status = "running";
        try { status = (await api(`/api/episodes/${x.episodeId}`)).status; } catch (e) { break; }
        if (status === "running") continue;
        updateEntry(x.key, { waitForEnd: false });
      }
      try {
        await post(`/api/episodes/${x.episodeId}/${ENDPOINT[x.kind]}`, entryBody(x));
        dropEntry(x.key);
        toast(`${describe(x)}: sent${x.error ? " (after the page's server came back)" : ""}`);
        refreshAll();
      } catch (e) {
        if (e.status === undefined) { updateEntry(x.key, { error: "NOT SENT yet — the page's server does not answer; kept in this browser and sent when it is back" }); break; }
        if (e.status === 401 || e.status === 403) { updateEntry(x.key, { error: `NOT SENT yet — the token is refused (${e.status}); sent once the token works` }); checkToken(); break; }
        let done = false;
        if (e.status === 409) try { done = await alreadyDone(x); } catch (e2) { /* kept as failed */ }
        if (done) { dropEntry(x.key); refreshAll(); }
        else updateEntry(x.key, { failed: true, error: `NOT SENT — refused: ${e.message}` });
      }
    }
  } finally { flushing = false; }
}
function showOutbox() {
  const waiting = loadOutbox().filter((x) => !(pending && x.key === pending.key) && (x.error || x.failed));
  const box = $("#outbox-banner");
  box.hidden = !waiting.length;
  box.innerHTML = waiting.map((x) => `<div data-key="${esc(x.key)}" data-episode-id="${x.episodeId}"><b>${esc(describe(x))}</b>: ${esc(x.error)}
    ${x.failed ? `<button class="small resend">re-send</button> <button class="small drop">drop it</button>` : ""}</div>`).join("");
  for (const b of box.querySelectorAll("button.resend")) b.onclick = () => { updateEntry(b.parentElement.dataset.key, { failed: false, error: "sending again…" }); flushOutbox(); };
  for (const b of box.querySelectorAll("button.drop")) b.onclick = () => { dropEntry(b.parentElement.dataset.key); toast("dropped: nothing was sent"); };
}
window.addEventListener("storage", (ev) => { if (ev.key === OUTBOX_KEY) showOutbox(); });  // another tab
setInterval(flushOutbox, 1000);
// Leaving the page sends the held label or discard at once (the loop waits for it); it also stays
// in the outbox, and the next load checks whether it arrived before sending it again.
window.addEventListener("pagehide", () => {
  if (!pending) return;
  const x = loadOutbox().find((e) => e.key === pending.key);
  if (!x || x.kind === "relabel") return;  // a relabel sent twice would be two rows: it waits for the next load
  fetch(`/api/episodes/${x.episodeId}/${ENDPOINT[x.kind]}`, { method: "POST", keepalive: true, body: JSON.stringify(entryBody(x)),
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + tokenInput.value.trim() } });
});
function discardAwaiting() {
  if (!awaiting || pending || outboxHolds(awaiting.id)) return;
  hold("discard", awaiting.id, { reason: $("#label-reason").value.trim() || "bad reset" });
}
function estop() {
  act(async () => {
    try { const r = await post("/api/robot/estop", { reason: "operator pressed e-stop on the page" }); $("#estop").classList.toggle("latched", r.estopped); return r; }
    catch (e) { throw new Error("E-STOP NOT CONFIRMED — use the hardware e-stop. " + e.message); }
  }, "E-STOP sent and confirmed by the robot server");
}
$("#start").onclick = startEpisode;
$("#abort").onclick = () => act(() => post("/api/loop/abort"), "abort requested");
$("#label-success").onclick = (ev) => labelAwaiting(true, Number(ev.currentTarget.dataset.episodeId));
$("#label-failure").onclick = (ev) => labelAwaiting(false, Number(ev.currentTarget.dataset.episodeId));
$("#undo-label").onclick = undoPending;
$("#send-label").onclick = sendPending;
$("#discard-awaiting").onclick = discardAwaiting;
$("#estop").onclick = estop;
$("#release").onclick = releaseClicked;
$("#release-banner").onclick = releaseClicked;
// A clicked button gives the focus back, so Space/Enter/S/F never re-press it.
document.addEventListener("click", (ev) => { if (ev.target.closest("button")) ev.target.closest("button").blur(); });

// Dropdowns the page draws itself. A native <select>'s popup belongs to the browser and takes every
// key while it is open: in Chromium no keydown reached the page at all, so Escape only closed the
// popup and Space never stopped the arm. Each <select> stays as the value (hidden, its change
// event and options as before); a button and a list of buttons in the page replace its popup, so
// the E-STOP keys below see every key, list open or not (Escape also closes the list).
const dropdownClosers = [];
function closeDropdowns() { for (const close of dropdownClosers) close(); }
function dropdown(sel) {
  const btn = document.createElement("button"), list = document.createElement("div");
  btn.type = "button"; btn.id = `${sel.id}-button`; btn.className = "dropdown small";
  btn.setAttribute("aria-haspopup", "listbox"); btn.setAttribute("aria-expanded", "false");
  btn.setAttribute("aria-label", sel.getAttribute("aria-label") || sel.id);
  list.id = `${sel.id}-list`; list.className = "dropdown-list"; list.setAttribute("role", "listbox"); list.hidden = true;
  sel.hidden = true; sel.after(btn); document.body.append(list);
  const label = () => { btn.textContent = `${sel.selectedOptions[0]?.textContent ?? "—"} ▾`; };
  const close = () => { if (!list.hidden) { list.hidden = true; btn.setAttribute("aria-expanded", "false"); } };
  btn.onclick = () => {
    if (!list.hidden) { close(); return; }
    closeDropdowns();
    list.innerHTML = [...sel.options].map((o, i) => `<button type="button" role="option" data-index="${i}" aria-selected="${o.selected}">${esc(o.textContent)}</button>`).join("");
    const r = btn.getBoundingClientRect();
    list.style.left = `${r.left + window.scrollX}px`; list.style.top = `${r.bottom + window.scrollY}px`;
    list.hidden = false; btn.setAttribute("aria-expanded", "true");
    (list.querySelector("[aria-selected=true]") || list.firstElementChild)?.focus();
  };
  list.onclick = (ev) => {
    const o = ev.target.closest("[role=option]");
    if (!o) return;
    sel.selectedIndex = Number(o.dataset.index); close();
    sel.dispatchEvent(new Event("change"));
  };
  sel.addEventListener("change", label);
  new MutationObserver(label).observe(sel, { childList: true, subtree: true });  // options refilled
  label();
  dropdownClosers.push(close);
}
for (const sel of document.querySelectorAll("select")) dropdown(sel);
document.addEventListener("click", (ev) => { if (!ev.target.closest(".dropdown, .dropdown-list")) closeDropdowns(); }, true);

// E-STOP from the keyboard whatever has the focus: Escape everywhere, Space everywhere but where it
// types a space (a text field). Caught first (capture, on window: before any element's own
// handler) and not passed on, so no video, checkbox or dropdown plays, ticks or opens instead; a
// held key sends one e-stop. An open dropdown list is closed too.
const TEXT_ENTRY = "textarea, [contenteditable], input:not([type=checkbox]):not([type=radio]):not([type=range]):not([type=button])";
window.addEventListener("keydown", (ev) => {
  if (ev.ctrlKey || ev.altKey || ev.metaKey) return;
  const inText = ev.target instanceof Element && ev.target.closest(TEXT_ENTRY);
  if (ev.key !== "Escape" && !(ev.code === "Space" && !ev.shiftKey && !inText)) return;
  ev.preventDefault(); ev.stopPropagation();
  if (!ev.repeat) estop();
  closeDropdowns();
}, true);
// The other shortcuts: unmodified keys only (Ctrl+F is the browser's find; Caps Lock is no
// modifier), and never while the focus is in a field or a video (text there is text).
const KEY_IGNORING = "input, textarea, select, video, audio, [contenteditable], .dropdown, .dropdown-list";
document.addEventListener("keydown", (ev) => {
  if (ev.ctrlKey || ev.altKey || ev.metaKey || ev.shiftKey || ev.repeat) return;
  if (ev.target instanceof Element && ev.target.closest(KEY_IGNORING)) return;
  const key = ev.key.length === 1 ? ev.key.toLowerCase() : ev.key;
  if (key === "Enter") { ev.preventDefault(); startEpisode(); }
  else if (key === "s" && awaiting) labelAwaiting(true, awaiting.id);
  else if (key === "f" && awaiting) labelAwaiting(false, awaiting.id);
  else if (key === "u") undoPending();
});

// --- teleoperation from this page: keys and a gamepad ------------------------------------------
// While the page holds control (a take of the record panel records, or the operator took control
// of a running episode with PDE_TELEOP_PERSON=page) it sends its input state every send period:
// six deflections in [-1, 1] (x, y, z, rx, ry, rz in the robot base frame; a held key is a full
// deflection) and two counters (gripper presses, hand-back presses). The server applies the one
// teleop configuration (deadband, speeds: teleop/page.py) and its watchdog stops the arm when the
// commands stop. Keys never collide with the shortcuts above (E-STOP Esc/Space, Enter, S, F, U)
// and never act while the focus is in a field.
const TELEOP_AXIS_KEYS = {
  ArrowUp: [0, 1], ArrowDown: [0, -1], ArrowLeft: [1, 1], ArrowRight: [1, -1], PageUp: [2, 1], PageDown: [2, -1],
  j: [3, 1], l: [3, -1], i: [4, 1], k: [4, -1], q: [5, 1], e: [5, -1],
};
const TELEOP_GRIPPER_KEY = "g", TELEOP_END_KEY = "h";
const PAD_GRIPPER_BUTTON = 0, PAD_END_BUTTON = 1;  // A, B on the standard layout
const teleop = { config: null, holder: null, takeoverEpisode: null, held: new Set(), gripper: 0, end: 0, padButtons: [], device: "keyboard", inFlight: false, error: "", timer: null };
const controlling = () => teleop.holder === "record" || (teleop.holder === "takeover" && teleop.takeoverEpisode !== null);
function teleopKey(ev) { return ev.key.length === 1 ? ev.key.toLowerCase() : ev.key; }
document.addEventListener("keydown", (ev) => {
  if (!controlling() || ev.ctrlKey || ev.altKey || ev.metaKey) return;
  if (ev.target instanceof Element && ev.target.closest(KEY_IGNORING)) return;
  const key = teleopKey(ev);
  if (key in TELEOP_AXIS_KEYS) { ev.preventDefault(); teleop.held.add(key); teleop.device = "keyboard"; sendTeleop(); }
  else if (key === TELEOP_GRIPPER_KEY && !ev.repeat) { teleop.gripper += 1; teleop.device = "keyboard"; sendTeleop(); }
  else if (key === TELEOP_END_KEY && !ev.repeat) handBack();
});
document.addEventListener("keyup", (ev) => { if (teleop.held.delete(teleopKey(ev)) && controlling()) sendTeleop(); });
window.addEventListener("blur", () => { teleop.held.clear(); });  // a key let go elsewhere never arrives
async function handBack() {
  if (!controlling()) return;
  teleop.end += 1; teleop.held.clear();
  const episode = teleop.takeoverEpisode;
  if (teleop.holder === "takeover") { teleop.takeoverEpisode = null; showTeleop(); }
  // The press must reach the server even when a send is in flight now, after which a handed-back
  // page sends no more: a final send of its own, after the one in flight.
  const sent = await sendTeleop(true);
  if (teleop.holder !== "takeover") return;
  if (sent) toast("handed back: the policy goes on at its next chunk");
  else {
    teleop.takeoverEpisode = episode; showTeleop();
    toast(`hand-back NOT SENT — ${teleop.error}: you still hold control (the arm holds still while the page is silent); press H again`);
  }
}
function gamepadAxes(axes) {
  const pads = navigator.getGamepads ? Array.from(navigator.getGamepads()).filter((p) => p && p.connected) : [];
  const pad = pads[0];
  if (!pad) return;
  const a = (i) => Number(pad.axes[i] || 0);
  const stick = [-a(1), -a(0), -a(3), 0, 0, -a(2)];  // left stick x/y, right stick z/yaw
  const pressed = (i) => !!(pad.buttons[i] && pad.buttons[i].pressed);
  if (pressed(PAD_GRIPPER_BUTTON) && !teleop.padButtons[PAD_GRIPPER_BUTTON]) teleop.gripper += 1;
  const endNow = pressed(PAD_END_BUTTON) && !teleop.padButtons[PAD_END_BUTTON];
  teleop.padButtons = pad.buttons.map((b) => !!(b && b.pressed));
  if (stick.some((v) => Math.abs(v) > 0.01) || endNow) teleop.device = "gamepad: " + pad.id;
  stick.forEach((v, i) => { axes[i] += v; });
  if (endNow) handBack();
}
function teleopAxes() {
  const axes = [0, 0, 0, 0, 0, 0];
  for (const key of teleop.held) { const [i, sign] = TELEOP_AXIS_KEYS[key]; axes[i] += sign; }
  gamepadAxes(axes);
  return axes.map((v) => Math.max(-1, Math.min(1, v)));
}
const HAND_BACK_TRIES = 3;
async function sendTeleop(final = false) {
  if (!final && (!controlling() || teleop.inFlight)) return true;
  while (teleop.inFlight) await new Promise((r) => setTimeout(r, 10));  // a final send: after the one in flight
  teleop.inFlight = true;
  const axes = teleopAxes();
  for (let tries = final ? HAND_BACK_TRIES : 1; tries > 0; tries--) {
    try {
      await post("/api/teleop/command", { axes, gripper_presses: teleop.gripper, end_presses: teleop.end, device: teleop.device });
      teleop.error = "";
      break;
    } catch (e) { teleop.error = e.message; }
  }
  teleop.inFlight = false;
  const st = $("#teleop-status");
  st.dataset.axes = axes.join(",");
  showTeleop();
  return !teleop.error;
}
function showTeleop() {
  const st = $("#teleop-status");
  st.hidden = !controlling();
  st.classList.toggle("silent", !!teleop.error);
  st.dataset.device = teleop.device;
  st.textContent = teleop.error ? `NOT SENT — ${teleop.error}` : `you hold control (${teleop.holder === "record" ? "recording a take" : "took over the episode"}) · ${teleop.device} · arrows, PgUp/PgDn, I/J/K/L, Q/E move, G gripper, H ${teleop.holder === "record" ? "ends the take" : "hands back"}`;
  $("#hand-back").hidden = !(teleop.holder === "takeover" && teleop.takeoverEpisode !== null);
}
async function refreshTeleop() {
  const t = await api("/api/teleop");
  teleop.config = t;
  const was = controlling();
  teleop.holder = t.holder;
  if (teleop.holder !== "takeover" || !current.episode || current.episode.id !== teleop.takeoverEpisode) teleop.takeoverEpisode = null;
  if (controlling() && !teleop.timer) teleop.timer = setInterval(() => sendTeleop(), t.send_period_ms);
  if (!controlling() && teleop.timer) { clearInterval(teleop.timer); teleop.timer = null; teleop.held.clear(); }
  if (was !== controlling()) showTeleop();
}
$("#hand-back").onclick = handBack;

// --- pde record from the page: reset, record, stop, keep or discard --------------------------------
let rec = { phase: "idle" };
let recVideoKey = "";
async function refreshRecord() {
  rec = await api("/api/record");
  const sel = $("#rec-task");
  if (sel.options.length !== rec.tasks.length) sel.innerHTML = rec.tasks.map((t) => `<option>${esc(t)}</option>`).join("");
  $("#rec-phase").textContent = rec.phase;
  $("#rec-phase").className = "phase " + rec.phase;
  const busy = ["resetting", "recording"].includes(rec.phase);
  $("#rec-reset").disabled = !connected || busy || rec.phase === "recorded";
  $("#rec-start").disabled = !connected || rec.phase !== "ready";
  $("#rec-stop").disabled = !connected || rec.phase !== "recording";
  $("#rec-keep").disabled = $("#rec-discard").disabled = !connected || rec.phase !== "recorded";
  $("#rec-info").textContent = rec.phase === "recording" ? `recording ${rec.task}: ${rec.rows} rows` : rec.phase === "ready" ? `${rec.task}: at its reset pose — record` : rec.phase === "resetting" ? `resetting the arm for ${rec.task}…` : `takes go to ${rec.demos_dir}`;
  $("#rec-error").textContent = rec.error ? operatorText(rec.error) : "";
  $("#rec-counts tbody").innerHTML = Object.entries(rec.counts).map(([t, c]) => `<tr data-task="${esc(t)}"><td>${esc(t)}</td><td class="kept">${c.kept}</td><td class="discarded">${c.discarded}</td></tr>`).join("")
    || '<tr><td colspan="3" class="muted">no takes yet</td></tr>';
  const last = rec.last;
  $("#rec-last").hidden = !last;
  if (last) {
    $("#rec-last-meta").textContent = `${last.task} · ${last.rows} rows, ${last.rows_dropped} dropped, ${last.rows_clipped} clipped, ${last.watchdog_stops} held by the watchdog`
      + (last.task_success === null ? "" : ` · the simulator's check: ${last.task_success ? "success" : "failure"}`)
      + (last.kept === null ? " · keep or discard it" : last.kept ? " · kept" : " · discarded");
    const cam = last.videos.external ? "external" : Object.keys(last.videos)[0];
    const key = cam ? last.videos[cam] : "";
    if (key !== recVideoKey) {
      recVideoKey = key;
      $("#rec-video").innerHTML = cam ? `<video controls muted preload="auto" data-camera="${esc(cam)}" src="${key}"></video>` : '<p class="muted">no video</p>';
    }
  }
}
$("#rec-reset").onclick = () => act(() => post("/api/record/reset", { task: $("#rec-task").value }), "resetting the arm for the take…").then(refreshRecord);
$("#rec-start").onclick = () => act(() => post("/api/record/start"), "recording: you hold control (keys or gamepad)").then(() => { refreshRecord(); refreshTeleop(); });
$("#rec-stop").onclick = () => act(() => post("/api/record/stop"), "take stopped").then(refreshRecord);
function saveTake(keep) {
  act(() => post("/api/record/save", { keep, note: $("#rec-note").value.trim() }), keep ? "take kept" : "take discarded")
    .then(() => { $("#rec-note").value = ""; refreshRecord(); });
}
$("#rec-keep").onclick = () => saveTake(true);
$("#rec-discard").onclick = () => saveTake(false);

// --- history and detail -----------------------------------------------------------------------
// Paged newest first: `pageStack` holds the before_id of each page shown so far (null: newest).
const PAGE_SIZE = 50;
let pageStack = [null];
let lastPage = [];
function historyQuery() {
  const q = new URLSearchParams({ limit: String(PAGE_SIZE) });
  for (const [id, key] of [["#f-task", "task"], ["#f-prompt", "prompt_id"], ["#f-stage", "stage"], ["#f-label", "label"], ["#f-status", "status"]]) {
    if ($(id).value) q.set(key, $(id).value);
  }
  const before = pageStack[pageStack.length - 1];
  if (before !== null) q.set("before_id", String(before));
  return q;
}
async function refreshHistory() {
  const eps = await api("/api/episodes?" + historyQuery());
  lastPage = eps;
  $("#history tbody").innerHTML = eps.map((e) => `<tr data-episode-id="${e.id}" class="${e.status === "discarded" ? "discarded" : ""}">
    <td>${e.id}</td><td>${esc(e.task)}</td><td>${esc(e.rollout_prompt)}</td><td>${e.stage}</td><td>v${e.policy_version}</td>
    <td title="${esc(e.abort_reason || e.discard_reason)}">${e.status}${e.abort_reason ? " ⚠" : ""}${e.note ? " ✎" : ""}</td><td>${fmtLabel(e.success)}</td><td>${fmtLabel(e.vlm_proposal)}${disagree(e)}</td>
    <td class="takeovers" title="${e.n_person_rows} rows commanded by a person">${e.n_interventions || "—"}</td></tr>`).join("")
    || '<tr><td colspan="9" class="muted">no episodes match</td></tr>';
  for (const tr of document.querySelectorAll("#history tbody tr[data-episode-id]")) tr.onclick = () => showDetail(Number(tr.dataset.episodeId));
  $("#page-info").textContent = eps.length ? `page ${pageStack.length} · #${eps[0].id}–#${eps[eps.length - 1].id}` : `page ${pageStack.length}`;
  $("#page-older").disabled = eps.length < PAGE_SIZE;
  $("#page-newest").disabled = pageStack.length === 1;
}
// A person's takeovers in an episode (their rows are left out of PPO's ratio).
const takeoverText = (n, rows) => `${n} takeover${n === 1 ? "" : "s"} by a person (${rows} row${rows === 1 ? "" : "s"})`;
// Operator and VLM disagree: flagged so the VLM's reasoning can be checked against the video.
const disagree = (e) => (e.success !== null && e.vlm_proposal !== null && e.success !== e.vlm_proposal ? ' <span class="flag" title="operator and VLM disagree">≠</span>' : "");
function resetPaging() { pageStack = [null]; refreshHistory().catch(() => {}); }
$("#page-older").onclick = () => { if (lastPage.length) { pageStack.push(lastPage[lastPage.length - 1].id); refreshHistory().catch(() => {}); } };
$("#page-newest").onclick = resetPaging;
for (const id of ["#f-prompt", "#f-stage", "#f-label", "#f-status"]) $(id).onchange = resetPaging;
$("#f-task").onchange = async () => {
  const task = $("#f-task").value;
  const ps = task ? await api(`/api/tasks/${encodeURIComponent(task)}/prompts`) : [];
  $("#f-prompt").innerHTML = '<option value="">all prompts</option>' + ps.map((p) => `<option value="${p.id}">${esc(p.text)} (${p.status})</option>`).join("");
  resetPaging();
};
function fillTaskFilter(tasks) {
  const sel = $("#f-task"), have = new Set([...sel.options].map((o) => o.value));
  for (const t of tasks) if (!have.has(t.name)) sel.insertAdjacentHTML("beforeend", `<option value="${esc(t.name)}">${esc(t.name)}</option>`);
}

let detailId = null;
let detailCanRelabel = false;
async function showDetail(id) {
  const e = await api(`/api/episodes/${id}`);
  const firstOpen = detailId !== id;
  detailId = id; $("#detail").hidden = false; $("#detail-id").textContent = "#" + id;
  $("#detail-meta").textContent = `${e.task} · "${e.rollout_prompt}" · ${e.stage} · policy v${e.policy_version} · ${e.status} · ${e.n_chunks} chunks` + (e.n_interventions ? ` · ${takeoverText(e.n_interventions, e.n_person_rows)}` : "") + (e.abort_reason ? ` · aborted: ${e.abort_reason}` : "");
  if (firstOpen) {
    $("#detail-videos").innerHTML = Object.entries(e.videos).map(([cam, url]) =>
      `<figure><video controls muted preload="auto" data-camera="${esc(cam)}" src="${url}"></video><figcaption>${esc(cam)}</figcaption></figure>`).join("") || '<p class="muted">no video (the episode did not end)</p>';
    $("#note").value = e.note;
  }
  $("#detail-labels tbody").innerHTML = e.labels.map((l) => `<tr><td>${new Date(l.created_at).toLocaleString()}</td><td>${l.source}${l.authoritative ? "" : " (proposal)"}</td><td>${fmtLabel(l.success)}</td><td>${esc(l.operator || "—")}</td><td>${esc(l.reason)}</td></tr>`).join("");
  detailPpoWarning = e.ppo_used ? `PPO already trained on this label (the update to policy v${e.ppo_used.version}, episodes up to #${e.ppo_used.trained_through_episode_id}): a change now does not undo that update; later updates use the new label` : "";
  $("#detail-ppo").hidden = !detailPpoWarning;
  $("#detail-ppo").textContent = detailPpoWarning;
  const discarded = e.status === "discarded";
  $("#detail-discarded").hidden = !discarded;
  $("#detail-discarded").textContent = discarded ? `Discarded ${new Date(e.discarded_at).toLocaleString()}: ${e.discard_reason} — not used for training or statistics.` : "";
  $("#discard").hidden = discarded; $("#discard-reason").hidden = discarded; $("#restore").hidden = !discarded;
  $("#discard").disabled = !["awaiting_label", "labelled", "aborted"].includes(e.status);
  detailCanRelabel = e.status === "labelled" || e.status === "awaiting_label";
  updateButtons();
  if (firstOpen) $("#detail").scrollIntoView({ behavior: "instant", block: "nearest" });
}
let detailPpoWarning = "";
function relabel(success) {
  if (detailId === null) return;
  hold("relabel", detailId, { success, reason: $("#relabel-reason").value.trim() || "relabelled on the page" }, detailPpoWarning);
  $("#relabel-reason").value = "";
}
$("#relabel-success").onclick = () => relabel(true);
$("#relabel-failure").onclick = () => relabel(false);
$("#discard").onclick = () => {
  const id = detailId, reason = $("#discard-reason").value.trim();
  if (!reason) { toast("say why the episode is discarded (e.g. bad reset); nothing was changed"); $("#discard-reason").focus(); return; }
  hold("discard", id, { reason }, detailPpoWarning);
  $("#discard-reason").value = "";
};
$("#restore").onclick = () => { const id = detailId; act(async () => { const r = await post(`/api/episodes/${id}/restore`); await showDetail(id); return r; }, `episode ${id} restored`); };
$("#save-note").onclick = () => { const id = detailId; act(() => api(`/api/episodes/${id}/note`, { method: "PUT", body: JSON.stringify({ note: $("#note").value }) }), `note on episode ${id} saved`); };
$("#detail-close").onclick = () => { detailId = null; $("#detail").hidden = true; $("#detail-videos").innerHTML = ""; };

// --- pools and curves ---------------------------------------------------------------------------
async function refreshPools() {
  const tasks = await api("/api/tasks");
  fillTaskFilter(tasks);
  const parts = await Promise.all(tasks.map(async (t) => {
    const ps = await api(`/api/tasks/${encodeURIComponent(t.name)}/prompts`);
    const rows = ps.map((p) => `<tr data-prompt-id="${p.id}" class="${p.rejudge ? "rejudge" : ""}"><td>${esc(p.text)}</td><td>${p.status}</td><td>${p.n_success}/${p.n_episodes}</td>
      <td>${p.success_rate === null ? "—" : Math.round(100 * p.success_rate) + "%"}</td>
      <td class="takeovers" title="takeovers by a person over the prompt's finished episodes">${p.n_interventions ? `${p.n_interventions} in ${p.n_intervened}/${p.n_finished} episodes` : "—"}</td><td class="muted">${esc(p.summary)}${p.rejudge
        ? `<div class="warn">${esc(p.rejudge)} ${t.stage === "bootstrap" ? `<button class="small admit" data-prompt-id="${p.id}">admit to pool</button>` : ""}</div>` : ""}</td></tr>`).join("");
    return `<div class="pooltask"><h3>${esc(t.name)} <span class="muted">stage ${t.stage} · iteration ${t.iteration} · α ${t.alpha.toFixed(2)} · pool ${t.pool_size}</span></h3>
      <div class="scroll-x"><table><thead><tr><th>prompt</th><th>status</th><th>successes</th><th>rate</th><th>takeovers</th><th>summary</th></tr></thead><tbody>${rows}</tbody></table></div></div>`;
  }));
  $("#pools").innerHTML = parts.join("") || '<p class="muted">no tasks yet (the loop creates them)</p>';
  for (const b of document.querySelectorAll("#pools button.admit")) b.onclick = () => act(() => post(`/api/prompts/${b.dataset.promptId}/admit`), "prompt admitted to the pool");
  const curves = await Promise.all(tasks.map(async (t) => [t.name, await api(`/api/tasks/${encodeURIComponent(t.name)}/curves`)]));
  $("#curves").innerHTML = curves.map(([name, c]) => {
    const byEpisode = c.ppo_updates.map((m) => ({ x: m.trained_through_episode_id, label: `v${m.version}` }));
    const byLabelled = c.ppo_updates.map((m) => ({ x: m.labelled_episodes, label: `v${m.version}` }));
    const versions = c.success_by_version.map((v) => `<span data-version="${v.version}">policy v${v.version}: <b>${Math.round(100 * v.success_rate)}%</b> of ${v.n_episodes}</span>`).join(" · ");
    return `<h3>${esc(name)}</h3><div class="plots">
    ${plot(`canonical-prompt success (last ${c.canonical_window})`, [["canonical", c.canonical_success]], 0, 1, "episode #", "canonical-prompt success", byEpisode)}
    ${plot("success per prompt (cumulative)", Object.entries(c.prompt_success), 0, 1, "episode #", undefined, byEpisode)}
    ${plot("α", [["α", c.alpha]], 0, 1, "labelled episodes", undefined, byLabelled)}${plot("pool size", [["pool", c.pool_size]], 0, null, "labelled episodes", undefined, byLabelled)}</div>
    <p class="by-version" data-task="${esc(name)}">success per policy version: ${versions || "—"}${c.ppo_updates.length ? " · dashed lines: PPO updates (the newest episode in each batch)" : ""}</p>`;
  }).join("");
}

// One SVG line per series ([name, [[x, y], ...]]); `key` names the plot for tests (data-title).
const COLOURS = ["#2456d6", "#d66a24", "#1f7a3a", "#8a2be2", "#b3261e", "#008b8b"];
// Several series get a legend (colour → name) under the plot; `marks` ([{x, label}]) are dashed
// vertical lines, the PPO updates.
function plot(title, series, yMin, yMax, xLabel, key = title, marks = []) {
  const W = 300, H = 140, L = 34, R = 8, T = 18, B = 20;
  const all = series.flatMap(([, pts]) => pts);
  const n = series.length === 1 ? series[0][1].length : all.length;
  if (!all.length) return `<svg class="plot" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" data-title="${esc(key)}" data-points="0"><text x="${L}" y="14">${esc(title)}</text><text x="${L}" y="70">no data yet</text></svg>`;
  const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
  const lo = yMin ?? Math.min(...ys), hi = yMax ?? Math.max(...ys, lo + 1);
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), sy = (y) => H - B - ((y - lo) / (hi - lo || 1)) * (H - T - B);
  const lines = series.map(([name, pts], k) => {
    const c = COLOURS[k % COLOURS.length];
    const d = pts.map((p, i) => `${i ? "L" : "M"}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join("");
    return `<path d="${d}" fill="none" stroke="${c}" stroke-width="2"><title>${esc(name)}</title></path>` +
      (pts.length <= 200 ? pts.map((p) => `<circle cx="${sx(p[0]).toFixed(1)}" cy="${sy(p[1]).toFixed(1)}" r="2.5" fill="${c}"><title>${esc(name)}: ${(+p[1]).toFixed(2)} at ${xLabel} ${p[0]}</title></circle>`).join("") : "");
  }).join("");
  const ppo = marks.filter((m) => m.x >= x0 && m.x <= x1).map((m) => `<g class="ppo-mark" data-version="${esc(m.label)}"><line x1="${sx(m.x).toFixed(1)}" y1="${T}" x2="${sx(m.x).toFixed(1)}" y2="${H - B}" stroke="#8a2be2" stroke-dasharray="3 3"/>` +
    `<text x="${(sx(m.x) + (sx(m.x) > W - R - 24 ? -2 : 2)).toFixed(1)}" y="${T + 9}" text-anchor="${sx(m.x) > W - R - 24 ? "end" : "start"}" style="fill:#8a2be2">${esc(m.label)}</text><title>PPO update to ${esc(m.label)} (batch through ${xLabel} ${m.x})</title></g>`).join("");
  const last = series.length === 1 ? ` (last ${(+ys[ys.length - 1]).toFixed(2)})` : "";
  const svg = `<svg class="plot" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" data-title="${esc(key)}" data-points="${n}">
    <text x="${L}" y="12">${esc(title)}${last}</text>
    <line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#ccd"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#ccd"/>
    <text x="2" y="${T + 8}">${(+hi).toFixed(2)}</text><text x="2" y="${H - B}">${(+lo).toFixed(2)}</text>
    <text x="${L}" y="${H - 4}">${esc(xLabel)} ${x0}</text><text x="${W - R - 40}" y="${H - 4}">${x1}</text>${ppo}${lines}</svg>`;
  if (series.length < 2) return svg;
  const legend = series.map(([name], k) => `<span><i style="background:${COLOURS[k % COLOURS.length]}"></i>${esc(name)}</span>`).join("");
  return `<figure>${svg}<figcaption class="legend" data-for="${esc(key)}">${legend}</figcaption></figure>`;
}

// --- health ----------------------------------------------------------------------------------
let problems = [];  // /api/health's services that are down, with what to do
async function refreshHealth() {
  const h = await api("/api/health");
  $("#health").innerHTML = Object.entries(h.services).map(([name, s]) =>
    `<span class="pill ${s.ok ? "ok" : "down"}" data-service="${esc(name)}" title="${esc(s.detail)}">${esc(name)}${s.ok ? "" : " ✕"}</span>`).join("");
  const rs = h.services.robot_server || {};
  $("#estop").classList.toggle("latched", rs.estopped === true);
  // One banner for every service that is down, each with the command that starts it (the pill's
  // tooltip keeps the technical detail).
  problems = h.problems || [];
  const down = $("#service-banner");
  down.hidden = !problems.length;
  down.innerHTML = problems.map((p) => `<div data-service="${esc(p.service)}">${esc(p.title)}: <span class="what">${esc(p.what)}</span> — ${esc(p.action).replace(/`([^`]+)`/g, "<code>$1</code>")}</div>`).join("");
  const robotDown = problems.some((p) => p.service === "robot_server");
  $("#robot-info").textContent = rs.estopped ? "E-STOP LATCHED" : robotDown ? "robot server down: see the banner" : rs.detail || "";
  $("#robot-info").classList.toggle("error", rs.estopped === true);
  $("#estop-banner").hidden = rs.estopped !== true;
  $("#estop-reason").textContent = rs.estop_reason || "";
  updateButtons();
  // Shown only when the robot server reports a fault (older servers never do).
  $("#fault-banner").hidden = !rs.fault;
  $("#fault-text").textContent = rs.fault || "";
  $("#robot-limits").textContent = rs.limits || "";
}

// --- polling ---------------------------------------------------------------------------------
const every = (ms, fn) => { const run = () => fn().catch(() => {}).finally(() => setTimeout(run, ms)); run(); };
function refreshAll() { refreshState().catch(() => {}); refreshHistory().catch(() => {}); if (detailId !== null) showDetail(detailId).catch(() => {}); }
showOutbox();
every(300, refreshState);
every(1500, refreshHistory);
every(500, refreshHealth);  // a dead service is on the banner within robot_down_s (or service_stale_s) + 0.5 s
every(4000, refreshPools);
every(2000, refreshProgress);
every(300, refreshTeleop);
every(500, refreshRecord);
adoptHashToken();
