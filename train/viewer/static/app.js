// aworld-train view: plain JavaScript, no build step, nothing loaded from elsewhere.
// Routes (location.hash): #/r/RUN, #/r/RUN/s/SET, #/r/RUN/s/SET/e/EPISODE[/drift], #/compare?a=RUN:SET&b=RUN:SET
"use strict";

const app = document.getElementById("app");
const crumbs = document.getElementById("crumbs");
const live = document.getElementById("live");
const picker = document.getElementById("run-picker");
let runs = [];
let poll = null; // the current view's refresh timer
let colourMode = "logprob";

// -- helpers ------------------------------------------------------------------------------------
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const num = (v, digits = 3) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
const pct = (v) => (v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%");
const enc = encodeURIComponent;
const FAILED = new Set(["timeout", "tool_timeout", "tool_server_down", "error", "reward_error", "prompt_too_long", "segment_too_long", "worker_died"]);

async function api(path) {
  const response = await fetch(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function statusBadge(status) {
  const kind = status === "ok" ? "ok" : FAILED.has(status) ? "bad" : "warn";
  return `<span class="badge ${kind} status">${esc(status)}</span>`;
}

function statusMix(statuses) {
  return Object.entries(statuses || {}).sort((a, b) => b[1] - a[1])
    .map(([s, n]) => `${statusBadge(s)}<small>${n}</small>`).join(" ");
}

function setCrumbs(parts) {
  crumbs.innerHTML = parts.map(([label, href]) => (href ? `<a href="${href}">${esc(label)}</a>` : esc(label))).join(" / ");
}

function stopPolling() {
  if (poll) clearInterval(poll);
  poll = null;
  live.textContent = "";
}

function startPolling(refresh, everyMs = 3000) {
  stopPolling();
  live.textContent = "live";
  poll = setInterval(async () => {
    try {
      await refresh();
      live.textContent = "live · read " + new Date().toLocaleTimeString();
    } catch (err) {
      live.textContent = "live · " + err.message;
    }
  }, everyMs);
}

function greyed(reason, id = "") {
  return `<div class="greyed"${id ? ` id="${id}"` : ""}>${esc(reason)}</div>`;
}

// -- charts (SVG) -------------------------------------------------------------------------------
const COLOURS = ["#2f5fd0", "#d9822b", "#1a7f37", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#b7791f"];

function lineChart(title, series, opts = {}) {
  const points = series.flatMap((s) => s.points);
  if (!points.length) return `<div class="card chart" data-chart="${esc(title)}"><h3>${esc(title)}</h3>${greyed(opts.empty || "no data in this run folder")}</div>`;
  const W = 320, H = 150, L = 36, B = 18, T = 8, R = 8;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  let y0 = opts.ymin ?? Math.min(...ys), y1 = opts.ymax ?? Math.max(...ys);
  if (y1 - y0 < 1e-9) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => L + (x1 === x0 ? (W - L - R) / 2 : ((x - x0) / (x1 - x0)) * (W - L - R));
  const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - B - T);
  let svg = `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">`;
  svg += `<line class="axis" x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}"/><line class="axis" x1="${L}" y1="${T}" x2="${L}" y2="${H - B}"/>`;
  svg += `<text x="2" y="${T + 8}">${num(y1, 2)}</text><text x="2" y="${H - B}">${num(y0, 2)}</text>`;
  svg += `<text x="${L}" y="${H - 4}">${x0}</text><text x="${W - R - 20}" y="${H - 4}">${x1}</text>`;
  series.forEach((s, i) => {
    const colour = s.colour || COLOURS[i % COLOURS.length];
    const pts = s.points.slice().sort((a, b) => a[0] - b[0]);
    if (pts.length > 1 && !s.dots) svg += `<polyline fill="none" stroke="${colour}" stroke-width="1.8" points="${pts.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" ")}"/>`;
    pts.forEach((p) => (svg += `<circle cx="${sx(p[0])}" cy="${sy(p[1])}" r="2.6" fill="${colour}"><title>${esc(s.name)} step ${p[0]}: ${num(p[1])}</title></circle>`));
  });
  svg += "</svg>";
  const legend = series.map((s, i) => `<span><i style="background:${s.colour || COLOURS[i % COLOURS.length]}"></i>${esc(s.name)}</span>`).join("");
  return `<div class="card chart" data-chart="${esc(title)}"><h3>${esc(title)}</h3>${svg}<div class="legend">${legend}</div></div>`;
}

function statusChart(trainSets) {
  if (!trainSets.length) return lineChart("status mix", []);
  const statuses = [...new Set(trainSets.flatMap((s) => Object.keys(s.statuses)))].sort((a, b) => (a === "ok" ? -1 : b === "ok" ? 1 : a.localeCompare(b)));
  const W = 320, H = 150, L = 10, B = 14, T = 6;
  const bw = (W - L * 2) / trainSets.length;
  let svg = `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">`;
  trainSets.forEach((s, i) => {
    let y = H - B;
    statuses.forEach((status, k) => {
      const share = (s.statuses[status] || 0) / Math.max(s.episodes, 1);
      const h = share * (H - B - T);
      if (h > 0) svg += `<rect x="${L + i * bw + 1}" y="${y - h}" width="${Math.max(bw - 2, 1)}" height="${h}" fill="${status === "ok" ? "#4caf72" : COLOURS[(k + 1) % COLOURS.length]}"><title>step ${s.step}: ${esc(status)} ${s.statuses[status] || 0}</title></rect>`;
      y -= h;
    });
  });
  svg += "</svg>";
  const legend = statuses.map((st, k) => `<span><i style="background:${st === "ok" ? "#4caf72" : COLOURS[(k + 1) % COLOURS.length]}"></i>${esc(st)}</span>`).join("");
  return `<div class="card chart" data-chart="status mix"><h3>status mix</h3>${svg}<div class="legend">${legend}</div></div>`;
}

// -- overview -------------------------------------------------------------------------------------
async function showOverview(runIndex) {
  setCrumbs([[runs[runIndex].name]]);
  let signature = null;
  const draw = async () => {
    const o = await api(`/api/runs/${runIndex}`);
    if (o.signature === signature) return;
    signature = o.signature;
    renderOverview(runIndex, o);
  };
  await draw();
  startPolling(draw);
}

function renderOverview(runIndex, o) {
  const train = o.sets.filter((s) => s.kind === "train").sort((a, b) => a.step - b.step);
  const evals = o.sets.filter((s) => s.kind === "eval");
  const pts = (key) => train.filter((s) => s[key] !== null && s[key] !== undefined).map((s) => [s.step, s[key]]);
  const evalPts = o.eval_accuracy.length
    ? o.eval_accuracy.map((e) => [e.step, e.accuracy])
    : evals.filter((s) => s.step !== null && s.success_rate !== null).map((s) => [s.step, s.success_rate]);
  const memory = o.metrics.filter((m) => m.peak_rss_mb !== undefined).map((m) => [m.step, m.peak_rss_mb]);
  const charts = [
    lineChart("reward", [{ name: "mean reward", points: pts("reward_mean") }]),
    lineChart("accuracy", [{ name: "train: reward ≥ 0.999", points: pts("success_rate") }, { name: "held-out accuracy", points: evalPts, dots: true }], { ymin: 0, ymax: 1 }),
    statusChart(train),
    lineChart("tool-call rate", [{ name: "episodes that called a tool", points: pts("tool_call_rate") }], { ymin: 0, ymax: 1 }),
    lineChart("staleness", [{ name: "updates behind (oldest weights)", points: pts("staleness_mean") }], { empty: "no weight versions recorded in this run's token files" }),
    lineChart("memory", [{ name: "peak RSS (MB)", points: memory }], { empty: "no memory figures (the local backend's metrics.jsonl has them)" }),
  ];
  const tokens = o.sets.some((s) => s.tokens);
  app.innerHTML = `
    <h1 id="run-name">${esc(o.name)}</h1>
    <div class="facts card">
      <span><b>engine</b> ${esc(o.engine)}</span><span><b>model</b> ${esc(o.model ?? "–")}</span>
      <span><b>folder</b> <code>${esc(o.path)}</code></span>
      <span><b>steps</b> ${train.length}</span><span><b>evaluations</b> ${evals.length}</span>
      <span id="drift-count" class="drift-count"><b>drift</b> <span class="muted">counting…</span></span>
    </div>
    ${tokens ? "" : greyed("this run folder has no token files (written before runs kept tokens): token and drift views are greyed out", "no-tokens")}
    <h2>Over steps</h2><div class="grid" id="charts">${charts.join("")}</div>
    <h2>Training steps</h2>
    <table id="steps"><thead><tr><th>step</th><th>episodes</th><th>reward</th><th>reward ≥ 0.999</th><th>tool calls</th><th>statuses</th><th>groups (zero spread)</th><th>staleness</th><th>tokens</th></tr></thead>
    <tbody>${train.map((s) => `<tr class="clickable" data-set="${esc(s.name)}"><td>${s.step}</td><td>${s.episodes}</td><td>${num(s.reward_mean)}</td><td>${pct(s.success_rate)}</td><td>${pct(s.tool_call_rate)}</td><td>${statusMix(s.statuses)}</td><td>${s.groups} (${s.zero_spread_groups ?? "–"})</td><td>${num(s.staleness_mean, 2)}</td><td>${s.tokens ? "yes" : '<span class="muted">no</span>'}</td></tr>`).join("") || '<tr><td colspan="9" class="muted">no training step yet</td></tr>'}</tbody></table>
    <h2>Evaluations</h2>
    <table id="evals"><thead><tr><th>compare</th><th>set</th><th>step</th><th>episodes</th><th>accuracy</th><th>reward</th><th>statuses</th><th>tokens</th></tr></thead>
    <tbody>${evals.map((s) => `<tr class="clickable" data-set="${esc(s.name)}"><td><input type="checkbox" class="pick" value="${runIndex}:${esc(s.name)}"></td><td>${esc(s.name)}</td><td>${s.step ?? "–"}</td><td>${s.episodes}</td><td>${pct(s.success_rate)}</td><td>${num(s.reward_mean)}</td><td>${statusMix(s.statuses)}</td><td>${s.tokens ? "yes" : '<span class="muted">no</span>'}</td></tr>`).join("") || '<tr><td colspan="8" class="muted">no evaluation</td></tr>'}</tbody></table>
    <p><button id="compare-picked">Compare the two picked evaluations</button></p>`;
  app.querySelectorAll("tr[data-set]").forEach((tr) =>
    tr.addEventListener("click", (ev) => {
      if (ev.target.classList.contains("pick")) return;
      location.hash = `#/r/${runIndex}/s/${enc(tr.dataset.set)}`;
    }));
  document.getElementById("compare-picked").addEventListener("click", () => {
    const picked = [...app.querySelectorAll(".pick:checked")].map((c) => c.value);
    location.hash = `#/compare?a=${enc(picked[0] || "")}&b=${enc(picked[1] || "")}`;
  });
  refreshDrift(runIndex);
}

async function refreshDrift(runIndex, start = false) {
  const box = document.getElementById("drift-count");
  if (!box) return;
  const d = await api(`/api/runs/${runIndex}/drift-count${start ? "?start=1" : ""}`);
  if (d.reason) {
    box.classList.add("greyed");
    box.innerHTML = `<b>drift</b> ${esc(d.reason)}`;
    return;
  }
  if (!d.started && d.episodes > 0) {
    box.innerHTML = `<b>drift</b> <button id="count-drift">count over ${d.episodes} episodes</button> <span class="muted">(renders each one afresh)</span>`;
    document.getElementById("count-drift").onclick = () => refreshDrift(runIndex, true);
    return;
  }
  box.innerHTML = `<b>drift</b> <span class="drift-episodes">${d.with_drift}</span> of ${d.compared} episodes compared differ from a fresh render (<span class="drift-tokens">${d.differing_tokens}</span> tokens)` +
    (d.checked < d.episodes ? ` <span class="muted">· ${d.checked} of ${d.episodes} checked…</span>` : "");
  if (d.running || d.checked < d.episodes) setTimeout(() => refreshDrift(runIndex), 1500);
}

// -- a step or an evaluation --------------------------------------------------------------------
async function showSet(runIndex, set, tab) {
  setCrumbs([[runs[runIndex].name, `#/r/${runIndex}`], [set]]);
  const train = /^step_\d+$/.test(set);
  tab = tab || (train ? "groups" : "episodes");
  app.innerHTML = `<h1>${esc(set)}</h1>
    <div class="tabs"><button id="tab-groups" class="${tab === "groups" ? "active" : ""}">GRPO groups</button><button id="tab-episodes" class="${tab === "episodes" ? "active" : ""}">Episodes</button></div>
    <div id="set-body"></div>`;
  document.getElementById("tab-groups").onclick = () => (location.hash = `#/r/${runIndex}/s/${enc(set)}/groups`);
  document.getElementById("tab-episodes").onclick = () => (location.hash = `#/r/${runIndex}/s/${enc(set)}/episodes`);
  if (tab === "groups") await showGroups(runIndex, set, 0);
  else await showEpisodes(runIndex, set);
}

function openEpisode(runIndex, set, id) {
  location.hash = `#/r/${runIndex}/s/${enc(set)}/e/${enc(id)}`;
}

async function showGroups(runIndex, set, offset) {
  const body = document.getElementById("set-body");
  const g = await api(`/api/runs/${runIndex}/groups?set=${enc(set)}&offset=${offset}`);
  body.innerHTML = `<p class="muted" id="groups-summary">${g.total} groups · <b>${g.zero_spread}</b> with zero spread (every compared sample got the same reward: they teach nothing)</p>` +
    g.groups.map((grp) => `<div class="card group${grp.zero_spread ? " zero" : ""}" data-group="${esc(grp.group)}">
      <b>group ${esc(grp.group)}</b> · task <code>${esc(grp.task_id)}</code> · spread ${num(grp.spread)} · ${grp.in_baseline} of ${grp.members.length} in the baseline
      ${grp.zero_spread ? '<span class="badge warn zero-flag">zero spread: teaches nothing</span>' : ""}
      <div class="members">${grp.members.map((m) => `<div class="member" data-episode="${esc(m.episode_id)}">
        <div class="reward">${num(m.reward, 2)}</div>
        <div>advantage <b class="advantage">${m.advantage === null ? "–" : num(m.advantage)}</b></div>
        <div>${statusBadge(m.status)}</div>
        <div class="muted">${m.tool_calls} tool calls · ${m.sampled_tokens ?? "–"} sampled tokens</div></div>`).join("")}</div></div>`).join("") +
    pager(g.offset, g.groups.length, g.total, 40);
  body.querySelectorAll(".member").forEach((m) => (m.onclick = () => openEpisode(runIndex, set, m.dataset.episode)));
  bindPager(body, (o) => showGroups(runIndex, set, o));
}

function pager(offset, shown, total, size = 100) {
  if (total <= shown && offset === 0) return "";
  return `<div class="pager"><button data-offset="${Math.max(0, offset - size)}" ${offset === 0 ? "disabled" : ""}>previous</button>
    <span>${offset + 1}–${offset + shown} of ${total}</span>
    <button data-offset="${offset + shown}" ${offset + shown >= total ? "disabled" : ""}>next</button></div>`;
}

function bindPager(root, go) {
  root.querySelectorAll(".pager button").forEach((b) => (b.onclick = () => go(Number(b.dataset.offset))));
}

const filterState = {};

async function showEpisodes(runIndex, set, offset = 0) {
  const body = document.getElementById("set-body");
  const f = filterState[set] || (filterState[set] = { status: "", reward_min: "", reward_max: "", agent: "", tool: "", q: "" });
  const query = Object.entries(f).filter(([, v]) => v !== "").map(([k, v]) => `&${k}=${enc(v)}`).join("");
  const page = await api(`/api/runs/${runIndex}/episodes?set=${enc(set)}&offset=${offset}${query}`);
  const options = (values, chosen) => ['<option value="">any</option>', ...values.map((v) => `<option ${v === chosen ? "selected" : ""}>${esc(v)}</option>`)].join("");
  body.innerHTML = `<form class="filters" id="filters">
      <label>status<select name="status">${options(page.choices.statuses, f.status)}</select></label>
      <label>reward ≥<input name="reward_min" type="number" step="any" size="5" value="${esc(f.reward_min)}"></label>
      <label>reward ≤<input name="reward_max" type="number" step="any" size="5" value="${esc(f.reward_max)}"></label>
      <label>agent<select name="agent">${options(page.choices.agents, f.agent)}</select></label>
      <label>tool<select name="tool">${options(page.choices.tools, f.tool)}</select></label>
      <label>text<input name="q" type="search" value="${esc(f.q)}" placeholder="in messages, answers, errors"></label>
      <button type="submit">filter</button></form>
    <p class="muted" id="matched">${page.matched} of ${page.total} episodes</p>
    <table id="episodes"><thead><tr><th>episode</th><th>task</th><th>group</th><th>status</th><th>reward</th><th>advantage</th><th>turns</th><th>tool calls</th><th>tools</th><th>agents</th><th>sampled tokens</th></tr></thead>
    <tbody>${page.episodes.map((e) => `<tr class="clickable" data-episode="${esc(e.episode_id)}"><td><code>${esc(e.episode_id.slice(0, 12))}</code></td><td>${esc(e.task_id)}</td><td>${esc(e.group)}</td><td>${statusBadge(e.status)}</td><td>${num(e.reward, 2)}</td><td>${e.advantage === null ? "–" : num(e.advantage)}</td><td>${e.num_turns}</td><td>${e.tool_calls}</td><td>${esc((e.tool_names || []).join(", "))}</td><td>${esc((e.agents || []).filter(Boolean).join(", "))}</td><td>${e.sampled_tokens ?? "–"}</td></tr>`).join("")}</tbody></table>
    ${pager(page.offset, page.episodes.length, page.matched)}`;
  document.getElementById("filters").onsubmit = (ev) => {
    ev.preventDefault();
    new FormData(ev.target).forEach((v, k) => (f[k] = String(v)));
    showEpisodes(runIndex, set, 0);
  };
  body.querySelectorAll("tr[data-episode]").forEach((tr) => (tr.onclick = () => openEpisode(runIndex, set, tr.dataset.episode)));
  bindPager(body, (o) => showEpisodes(runIndex, set, o));
}

// -- one episode ------------------------------------------------------------------------------------
function tokenColour(tok, mode) {
  const [, , mask, lp, tlp] = tok;
  if (!mask) return "";
  if (mode === "diff") {
    if (tlp === null) return "";
    const d = Math.min(Math.abs(tlp - lp) / 1.0, 1);
    return `background:hsl(270,70%,${(97 - 42 * d).toFixed(1)}%)`;
  }
  const t = Math.max(0, Math.min(1, 1 + lp / 6));
  return `background:hsl(${(120 * t).toFixed(0)},75%,78%)`;
}

// a turn's own credit beside its mark, where the engine recorded it (reward r_t, advantage)
function turnCredit(seg, k) {
  const r = (seg.turn_rewards || [])[k], a = (seg.turn_advantages || [])[k];
  if (r === undefined && a === undefined) return "";
  return ` <span class="turn-reward">r ${num(r ?? null, 2)}</span> <span class="turn-advantage">A ${num(a ?? null)}</span>`;
}

function tokenSpans(tokens, turnStarts, mode, seg = {}) {
  const starts = new Map((turnStarts || []).map((s, k) => [s, k]));
  let out = "";
  tokens.forEach((tok, i) => {
    if (starts.has(i)) out += `<span class="turn-mark" data-turn="${starts.get(i)}" title="this LLM call's reward (the reward function's for the turn, plus the episode's on the last) and advantage, on every token it sampled">call ${starts.get(i) + 1}${turnCredit(seg, starts.get(i))}</span>`;
    const [id, text, mask, lp, tlp, version] = tok;
    const shown = text === null ? `⟨${id}⟩` : text;
    const special = /^<\|.*\|>$|^<\/?s>$/.test(shown) ? " sp" : "";
    const cls = mask ? (mode === "diff" && tlp === null ? "tok smp no-trainer" : "tok smp") : "tok ctx";
    const title = mask
      ? `id ${id} · sampled logprob ${num(lp, 4)}` + (tlp !== null ? ` · trainer logprob ${num(tlp, 4)} · difference ${num(tlp - lp, 4)}` : " · no trainer logprob") + (version !== null ? ` · weight version ${version}` : "")
      : `id ${id} · context: not sampled by the policy, no logprob`;
    out += `<span class="${cls}${special}" data-i="${i}" data-mask="${mask}" style="${tokenColour(tok, mode)}" title="${esc(title)}">${esc(shown)}</span>`;
  });
  return out;
}

function toolCallsTable(calls) {
  if (!calls.length) return '<p class="muted">no tool calls</p>';
  return `<table class="tool-calls"><thead><tr><th>call</th><th>tool</th><th>arguments</th><th>status</th><th>latency</th><th>result</th></tr></thead><tbody>${calls.map((c) => {
    const status = c.result === null || c.result === undefined ? '<span class="badge warn">no result</span>' : c.error ? '<span class="badge bad">error</span>' : '<span class="badge ok">ok</span>';
    const latency = c.latency_s === null || c.latency_s === undefined ? "–" : `${(1000 * c.latency_s).toFixed(0)} ms`;
    return `<tr class="tool-call" data-call="${esc(c.id)}"><td>LLM call ${Number(c.turn) + 1}</td><td><code>${esc(c.name)}</code></td><td><pre>${esc(JSON.stringify(c.arguments))}</pre></td><td class="status">${status}</td><td class="latency">${latency}</td><td><pre>${esc(c.result ?? "")}</pre></td></tr>`;
  }).join("")}</tbody></table>`;
}

function messagesBlock(messages) {
  return `<div class="messages">${(messages || []).map((m) => `<div class="msg"><b>${esc(m.role)}${m.name ? " · " + esc(m.name) : ""}</b>${esc(typeof m.content === "string" ? m.content : JSON.stringify(m.content))}${m.tool_calls ? "\n" + esc(JSON.stringify(m.tool_calls)) : ""}</div>`).join("")}</div>`;
}

function episodeHeader(e) {
  const extras = Object.entries(e.reward_extras || {}).map(([k, v]) => `<span class="badge">${esc(k)}: ${esc(typeof v === "object" ? JSON.stringify(v) : v)}</span>`).join(" ");
  return `<div class="facts card episode-facts">
      <span><b>status</b> ${statusBadge(e.status)}</span><span><b>reward</b> <span id="episode-reward">${num(e.reward, 3)}</span></span>
      <span><b>advantage</b> ${e.advantage === null ? "–" : num(e.advantage)}</span><span><b>task</b> <code>${esc(e.task_id)}</code></span>
      <span><b>group</b> ${esc(e.group || "–")}</span><span><b>LLM calls</b> ${e.num_turns}</span>
      <span><b>weight versions</b> ${e.version_min === null ? "–" : `${e.version_min}–${e.version_max}`}</span>
      <span><b>time</b> ${num((e.timings || {}).total_s, 2)} s</span>
      ${extras ? `<span><b>reward extras</b> ${extras}</span>` : ""}
    </div>
    ${e.error ? `<p class="card" id="episode-error"><b>${e.status === "malformed_tool_call" ? "malformed tool call" : "error"}</b> ${esc(e.error)}${e.malformed ? ` <span class="badge warn" id="episode-malformed">${esc(e.malformed)}</span>` : ""}</p>` : ""}
    <p><b>final answer</b> ${esc(e.final_answer || "–")} · <b>expected</b> ${esc(typeof e.ground_truth === "object" ? JSON.stringify(e.ground_truth) : e.ground_truth ?? "–")}</p>`;
}

function lanesBlock(e, mode) {
  if (!e.tokens.available) return greyed(e.tokens.reason, "tokens-greyed") + "<h3>Conversation (text)</h3>" + messagesBlock(e.messages) + "<h3>Tool calls</h3>" + toolCallsTable(e.tool_calls);
  const tokenizerNote = e.tokenizer.ok ? "" : greyed(`token ids shown without text: ${e.tokenizer.reason}`);
  return tokenizerNote + `<div class="lanes" style="grid-template-columns:repeat(${e.lanes.length}, minmax(0, 1fr))">${e.lanes.map((lane) => `<div class="lane${lane.policy_index === null || lane.policy_index === undefined ? "" : ` policy-${lane.policy_index % 4}`}" data-agent="${esc(lane.agent)}"${lane.policy ? ` data-policy="${esc(lane.policy)}"` : ""}>
      <h3>${e.lanes.length > 1 ? "agent " : ""}${esc(lane.agent || "agent")}${lane.policy ? ` <span class="policy-name">· policy ${esc(lane.policy)}</span>` : ""}</h3>
      ${lane.segments.map((seg) => `${rewriteBlock(seg)}<div class="segment" data-segment="${seg.index}">
        <div class="segment-head">segment ${seg.index + 1}${lane.segments.length > 1 ? ` · from the agent's call ${seg.first_call + 1}` : ""} · <span class="n-tokens">${seg.tokens.length}</span> tokens · prompt ${seg.prompt_tokens} · <span class="n-sampled">${seg.sampled}</span> sampled · advantage ${seg.advantage === null ? "–" : num(seg.advantage)}${seg.has_trainer ? "" : ' · <span class="muted">no trainer logprobs</span>'}</div>
        <div class="tokens">${tokenSpans(seg.tokens, seg.turn_starts, mode, seg)}</div></div>`).join("")}
      <h3>Tool calls</h3>${toolCallsTable(lane.tool_calls)}</div>`).join("")}</div>`;
}

async function showEpisode(runIndex, set, id, tab) {
  setCrumbs([[runs[runIndex].name, `#/r/${runIndex}`], [set, `#/r/${runIndex}/s/${enc(set)}`], [id]]);
  const e = await api(`/api/runs/${runIndex}/episode?set=${enc(set)}&id=${enc(id)}`);
  const hasTrainer = e.lanes.some((l) => l.segments.some((s) => s.has_trainer));
  if (!hasTrainer && colourMode === "diff") colourMode = "logprob";
  const base = `#/r/${runIndex}/s/${enc(set)}/e/${enc(id)}`;
  app.innerHTML = `<h1>episode <code>${esc(id)}</code></h1>${episodeHeader(e)}
    <div class="tabs"><button id="tab-tokens" class="${tab !== "drift" ? "active" : ""}">Tokens</button><button id="tab-drift" class="${tab === "drift" ? "active" : ""}" ${e.tokens.available ? "" : "disabled"} title="the ledger beside a fresh render of the same messages">Drift</button></div>
    <div id="episode-body"></div>`;
  document.getElementById("tab-tokens").onclick = () => (location.hash = base);
  document.getElementById("tab-drift").onclick = () => (location.hash = base + "/drift");
  const body = document.getElementById("episode-body");
  if (tab === "drift") return showDrift(runIndex, set, id, body);
  const draw = () => {
    body.innerHTML = `<div class="legend-bar">
        <label><input type="radio" name="colour" value="logprob" ${colourMode === "logprob" ? "checked" : ""}> colour by sampled logprob</label>
        <label title="${hasTrainer ? "" : "this engine computed no trainer logprobs for this episode"}"><input type="radio" name="colour" value="diff" id="colour-diff" ${colourMode === "diff" ? "checked" : ""} ${hasTrainer ? "" : "disabled"}> by trainer − sampler difference</label>
        <span><i class="swatch" style="background:hsl(120,75%,78%)"></i>logprob 0 <i class="swatch" style="background:hsl(0,75%,78%)"></i>≤ −6</span>
        <span><i class="swatch" style="background:hsl(270,70%,55%)"></i>|difference| ≥ 1</span>
        <span class="tok ctx">context (not sampled: masked)</span>
      </div>${lanesBlock(e, colourMode)}`;
    body.querySelectorAll("input[name=colour]").forEach((r) => (r.onchange = () => { colourMode = r.value; draw(); }));
  };
  draw();
}

async function showDrift(runIndex, set, id, body) {
  const d = await api(`/api/runs/${runIndex}/drift?set=${enc(set)}&id=${enc(id)}`);
  if (d.reason) { body.innerHTML = greyed(d.reason, "drift-greyed"); return; }
  const side = (ids, texts, same, trailing = 0) => ids.map((t, i) => {
    const cls = i >= ids.length - trailing ? "after" : same[i] ? "same" : "diff";
    return `<span class="tok ${cls}" title="id ${t}">${esc(texts ? texts[i] : `⟨${t}⟩`)}</span>`;
  }).join("");
  body.innerHTML = d.agents.map((a) => a.reason
    ? `<div class="drift-agent" data-agent="${esc(a.agent)}"><h3>${esc(a.agent || "agent")}</h3>${greyed(a.reason, "drift-greyed")}</div>`
    : `<div class="drift-agent" data-agent="${esc(a.agent)}"><h3>${esc(a.agent || "agent")}</h3>
      <p><b class="drift-differing">${a.differing}</b> tokens differ between the ledger (${a.ledger.length} tokens, up to the last sampled one) and a fresh render of the same messages (${a.fresh.length} tokens${a.trailing ? `, of which the last ${a.trailing} open the next turn: not compared` : ""})${a.earlier_segments ? ` · ${a.earlier_segments} earlier segment(s) of this agent not compared (the agent rewrote its history)` : ""}</p>
      <div class="legend-bar"><span class="tok diff">differs</span><span class="tok same">same</span><span class="tok after">after the ledger's end</span></div>
      <div class="drift-cols"><div><h3>ledger (what the policy saw and sampled)</h3><div class="tokens ledger">${side(a.ledger, a.ledger_text, a.ledger_same)}</div></div>
      <div><h3>fresh render by the chat template</h3><div class="tokens fresh">${side(a.fresh, a.fresh_text, a.fresh_same, a.trailing)}</div></div></div></div>`).join("");
}

// -- comparing two evaluations ----------------------------------------------------------------------
async function showCompare(params) {
  setCrumbs([["compare evaluations"]]);
  const overviews = await Promise.all(runs.map((r) => api(`/api/runs/${r.index}`)));
  const choices = overviews.flatMap((o, i) => o.sets.filter((s) => s.kind === "eval").map((s) => `${i}:${s.name}`));
  let a = params.get("a") || choices[0] || "", b = params.get("b") || choices[1] || "";
  const select = (name, chosen) => `<select id="pick-${name}">${choices.map((c) => `<option ${c === chosen ? "selected" : ""} value="${esc(c)}">${esc(runs[Number(c.split(":")[0])].name + " · " + c.split(":").slice(1).join(":"))}</option>`).join("")}</select>`;
  app.innerHTML = `<h1>Compare two evaluations on the same tasks</h1>
    <div class="filters"><label>A ${select("a", a)}</label><label>B ${select("b", b)}</label></div><div id="compare-body"></div>`;
  const go = () => (location.hash = `#/compare?a=${enc(document.getElementById("pick-a").value)}&b=${enc(document.getElementById("pick-b").value)}`);
  document.getElementById("pick-a").onchange = go;
  document.getElementById("pick-b").onchange = go;
  const body = document.getElementById("compare-body");
  if (!a || !b) { body.innerHTML = greyed("this needs two evaluations (eval/before and eval/after of a run, or aworld-train eval --checkpoints A B)"); return; }
  const c = await api(`/api/compare?a=${enc(a)}&b=${enc(b)}`);
  const cell = (eps) => eps.map((e) => `<span class="badge ${e.reward >= 0.999 ? "ok" : FAILED.has(e.status) ? "bad" : ""}" title="${esc(e.status)}">${num(e.reward, 2)}</span>`).join("");
  body.innerHTML = `<p id="compare-summary">${c.tasks.length} tasks in both · mean reward A ${num(c.a_mean)} → B ${num(c.b_mean)}${c.only_a || c.only_b ? ` · ${c.only_a} only in A, ${c.only_b} only in B` : ""}</p>
    <table id="compare-tasks"><thead><tr><th>task</th><th>A</th><th>B</th><th>change</th></tr></thead><tbody>${c.tasks.map((t, i) => `<tr class="clickable" data-task="${i}"><td><code>${esc(t.task_id)}</code></td><td>${cell(t.a)}</td><td>${cell(t.b)}</td><td class="${t.delta > 0 ? "delta-up" : t.delta < 0 ? "delta-down" : ""}">${t.delta > 0 ? "+" : ""}${num(t.delta, 2)}</td></tr>`).join("")}</tbody></table>
    <div id="pair"></div>`;
  body.querySelectorAll("tr[data-task]").forEach((tr) => (tr.onclick = () => showPair(a, b, c.tasks[Number(tr.dataset.task)])));
}

async function showPair(a, b, task) {
  const pair = document.getElementById("pair");
  const [runA, ...setA] = a.split(":"), [runB, ...setB] = b.split(":");
  const [ea, eb] = await Promise.all([
    api(`/api/runs/${runA}/episode?set=${enc(setA.join(":"))}&id=${enc(task.a[0].episode_id)}`),
    api(`/api/runs/${runB}/episode?set=${enc(setB.join(":"))}&id=${enc(task.b[0].episode_id)}`),
  ]);
  pair.innerHTML = `<h2>task <code>${esc(task.task_id)}</code>: the first sample of each</h2><div class="side-by-side">
    <div class="card" id="pair-a"><h3>A · ${esc(setA.join(":"))}</h3>${episodeHeader(ea)}${lanesBlock(ea, "logprob")}</div>
    <div class="card" id="pair-b"><h3>B · ${esc(setB.join(":"))}</h3>${episodeHeader(eb)}${lanesBlock(eb, "logprob")}</div></div>`;
  pair.scrollIntoView();
}

// -- routing ------------------------------------------------------------------------------------------
async function route() {
  stopPolling();
  const hash = location.hash.slice(1) || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "compare") return await showCompare(new URLSearchParams(query || ""));
    const runIndex = parts[0] === "r" ? Number(parts[1]) : Number(picker.value || 0);
    picker.value = String(runIndex);
    if (parts[2] === "s" && parts[4] === "e") return await showEpisode(runIndex, parts[3], parts[5], parts[6]);
    if (parts[2] === "s") return await showSet(runIndex, parts[3], parts[4]);
    return await showOverview(runIndex);
  } catch (err) {
    app.innerHTML = `<p class="card badge bad" id="error">${esc(err.message)}</p>`;
  }
}

(async () => {
  runs = await api("/api/runs");
  picker.innerHTML = runs.map((r) => `<option value="${r.index}">${esc(r.name)}</option>`).join("");
  picker.hidden = runs.length < 2;
  picker.onchange = () => (location.hash = `#/r/${picker.value}`);
  window.addEventListener("hashchange", route);
  await route();
})();
