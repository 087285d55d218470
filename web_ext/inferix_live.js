// Inferix live view: a panel per block and a live preview inside the running node and its Stream Out nodes.
//
// The server sends an `inferix.block` websocket event per finished block (nodes/comfy_runtime.py, BlockHooks):
// {node, run, block, num_blocks, timings: {denoise_s, decode_s, ...}, memory: {kv_gpu_bytes, kv_host_bytes},
//  preview: {filename, subfolder, type}}.
// The node that generates (Block Denoise, VAE Decode) already shows ComfyUI's own progress preview of the
// same frame, so it gets the panel only; the Stream Out / VAE Decode nodes it feeds get the panel and the
// preview image. While the prompt runs the panel has an Interrupt button (ComfyUI's POST /interrupt, as the
// Cancel button does); prompt changes mid-run are `inferix play`'s. A keyboard/mouse model (Matrix-Game 2.0) run
// without an Action Schedule announces itself with `inferix.controls` {node, controls}; its panel then has a
// Control button: click it to steer the run live with the model's keys and pointer-lock mouse-look (Esc
// leaves). Held keys and mouse movement go to POST /inferix/control (nodes/live_controls.py) and apply at the
// next block boundary.
// Everything lives in this module and in `node.inferixLive`; nothing global is patched. What the extension
// has seen is readable as `app.extensions.find((e) => e.name === "inferix.live").state`.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const EVENT = "inferix.block";
const CONTROLS_EVENT = "inferix.controls";
const CONTROL_ROUTE = "/inferix/control";
const LOOK_PERIOD_MS = 60; // one look message per period at most
const LOOK_MAX_PX = 4000; // each clamped
const PREVIEW_TYPES = new Set(["InferixVAEDecode", "InferixStreamOut"]);
const LIVE_TYPES = new Set(["InferixBlockDenoise", ...PREVIEW_TYPES]);
const MAX_BARS = 48; // per-block timing bars kept in the panel
const MAX_RUNS = 8; // runs remembered in `state.runs`
const PANEL_HEIGHT = 104;
const PREVIEW_HEIGHT = 200;

const state = {
  events: 0, // inferix.block events received
  running: false, // a prompt is executing
  promptId: null, // the executing prompt (for /interrupt)
  interruptRequested: false,
  lastEvent: null,
  runs: new Map(), // run id → {run, node, numBlocks, blocks: [{block, ms, denoise_ms, decode_ms}], memory, previewSrc}
  controls: new Map(), // node id → the model's controls ({keys, camera_keys, mouse, look_pitch, ...}) while it runs
  steering: null, // {node, held: [...], dx, dy} while a panel's Control mode is on
  controlErrors: 0,
};

const STYLE = `
.inferix-live{display:flex;flex-direction:column;gap:4px;box-sizing:border-box;height:100%;padding:2px 4px;
  font:11px/1.35 sans-serif;color:var(--input-text,#ddd);overflow:hidden}
.inferix-live .inferix-head{display:flex;align-items:center;gap:6px;white-space:nowrap}
.inferix-live .inferix-status{font-weight:600;padding:0 5px;border-radius:3px;background:#444}
.inferix-live .inferix-status[data-status=live]{background:#2e7d32;color:#fff}
.inferix-live .inferix-status[data-status=interrupted],.inferix-live .inferix-status[data-status=error]{background:#b71c1c;color:#fff}
.inferix-live .inferix-block{flex:1;overflow:hidden;text-overflow:ellipsis}
.inferix-live button{font:11px sans-serif;padding:1px 8px;border-radius:4px;cursor:pointer;border:1px solid #b71c1c;
  background:#5a1a1a;color:#fff}
.inferix-live button:disabled{opacity:0.5;cursor:default}
.inferix-live .inferix-progress{height:3px;background:#333;border-radius:2px;overflow:hidden}
.inferix-live .inferix-progress>div{height:100%;width:0;background:#4caf50}
.inferix-live .inferix-line{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;opacity:0.85}
.inferix-live .inferix-bars{display:flex;align-items:flex-end;gap:1px;height:22px;min-height:22px}
.inferix-live .inferix-bars>div{flex:1;max-width:8px;background:#5c9ded;min-height:1px}
.inferix-live img{flex:1;min-height:0;width:100%;object-fit:contain;display:none}
.inferix-live button.inferix-control{border-color:#1d6fb8;background:#173a5a}
.inferix-live button.inferix-control[data-on=true]{background:#4fb3ff;color:#000}
`;

function ensureStyle() {
  if (document.getElementById("inferix-live-style")) return;
  const style = document.createElement("style");
  style.id = "inferix-live-style";
  style.textContent = STYLE;
  document.head.append(style);
}

function formatBytes(bytes) {
  if (bytes == null) return "";
  if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
  if (bytes >= 2 ** 20) return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  return `${(bytes / 2 ** 10).toFixed(0)} KiB`;
}

function formatMs(ms) {
  return ms >= 10000 ? `${(ms / 1000).toFixed(1)} s` : `${ms.toFixed(0)} ms`;
}

// A node by execution id: "7", or "12:5" for node 5 inside subgraph node 12.
function findNode(id) {
  if (id == null) return null;
  let graph = app.graph;
  let node = null;
  for (const part of String(id).split(":")) {
    node = graph?.getNodeById?.(Number(part)) ?? null;
    if (!node) return null;
    graph = node.subgraph;
  }
  return node;
}

function getLink(graph, linkId) {
  if (linkId == null) return null;
  return graph.links?.get ? graph.links.get(linkId) : graph.links?.[linkId];
}

// Stream Out (and other live) nodes fed directly by `source`, in the same graph.
function downstreamLiveNodes(source) {
  const graph = source.graph ?? app.graph;
  const found = [];
  for (const node of graph?._nodes ?? graph?.nodes ?? []) {
    if (node === source || !LIVE_TYPES.has(node.comfyClass)) continue;
    if ((node.inputs ?? []).some((input) => getLink(graph, input.link)?.origin_id === source.id)) found.push(node);
  }
  return found;
}

function el(tag, className, parent) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  parent?.append(e);
  return e;
}

function ensureLiveWidget(node) {
  if (node.inferixLive) return node.inferixLive;
  ensureStyle();
  const withPreview = PREVIEW_TYPES.has(node.comfyClass);
  const root = el("div", "inferix-live");
  const head = el("div", "inferix-head", root);
  const status = el("span", "inferix-status", head);
  status.textContent = "Inferix";
  const block = el("span", "inferix-block", head);
  block.textContent = "no blocks yet";
  const button = el("button", "inferix-interrupt", head);
  button.textContent = "Interrupt";
  button.title = "Stop the running prompt (POST /interrupt); the streamed mp4 keeps the finished blocks";
  button.style.display = "none";
  button.addEventListener("click", (event) => {
    event.stopPropagation();
    state.interruptRequested = true;
    button.disabled = true;
    button.textContent = "Interrupting…";
    api.interrupt(state.promptId);
  });
  const control = el("button", "inferix-control", head);
  control.textContent = "Control";
  control.style.display = "none";
  control.addEventListener("click", (event) => {
    event.stopPropagation();
    if (state.steering) stopSteering();
    else startSteering(String(node.id), root, control);
  });
  const progress = el("div", "inferix-progress", root);
  const bar = el("div", null, progress);
  const timing = el("div", "inferix-line inferix-timing", root);
  const memory = el("div", "inferix-line inferix-memory", root);
  const bars = el("div", "inferix-bars", root);
  const img = el("img", null, withPreview ? root : null);
  const live = { root, status, block, button, control, bar, timing, memory, bars, img, withPreview, run: null };
  const widget = node.addDOMWidget?.("inferix_live", "inferix_live", root, {
    serialize: false,
    hideOnZoom: false,
    getMinHeight: () => PANEL_HEIGHT + (withPreview && live.run ? PREVIEW_HEIGHT : 0),
  });
  if (widget) widget.serialize = false;
  node.inferixLive = live;
  return live;
}

function growToFit(node) {
  const need = node.computeSize?.();
  if (need && (node.size[0] < need[0] || node.size[1] < need[1])) {
    node.setSize([Math.max(node.size[0], need[0]), Math.max(node.size[1], need[1])]);
  }
}

function renderStatus(live) {
  const record = live.run && state.runs.get(live.run);
  const isLive = !!record && state.running && record === latestRun();
  const status = !record ? "idle" : isLive ? "live" : record.status ?? "done";
  live.status.dataset.status = status;
  live.status.textContent = record ? status : "Inferix";
  live.button.style.display = isLive ? "" : "none";
  live.control.style.display = isLive && record && state.controls.has(String(record.node)) ? "" : "none";
  if (isLive && !state.interruptRequested) {
    live.button.disabled = false;
    live.button.textContent = "Interrupt";
  }
}

function render(node, record, withImage) {
  const live = ensureLiveWidget(node);
  const firstRun = live.run == null;
  live.run = record.run;
  const last = record.blocks[record.blocks.length - 1];
  live.block.textContent = `block ${last.block + 1}/${record.numBlocks}`;
  live.bar.style.width = `${Math.min(100, ((last.block + 1) / Math.max(1, record.numBlocks)) * 100).toFixed(1)}%`;
  const parts = [];
  if (last.denoise_ms != null) parts.push(`denoise ${formatMs(last.denoise_ms)}`);
  if (last.decode_ms != null) parts.push(`decode ${formatMs(last.decode_ms)}`);
  const avg = record.blocks.reduce((sum, b) => sum + b.ms, 0) / record.blocks.length;
  live.timing.textContent = `${parts.join(" · ") || "—"} · avg ${formatMs(avg)}/block`;
  const mem = record.memory ?? {};
  const kv = mem.kv_gpu_bytes ?? mem.gpu_bytes;
  live.memory.textContent = kv != null
    ? `KV cache ${formatBytes(kv)}${mem.kv_host_bytes ? ` + ${formatBytes(mem.kv_host_bytes)} offloaded` : ""}`
    : "KV cache —";
  const shown = record.blocks.slice(-MAX_BARS);
  const peak = Math.max(...shown.map((b) => b.ms), 1e-6);
  live.bars.replaceChildren(...shown.map((b) => {
    const div = document.createElement("div");
    div.style.height = `${Math.max(4, (b.ms / peak) * 100).toFixed(0)}%`;
    div.title = `block ${b.block + 1}: ${formatMs(b.ms)}`;
    return div;
  }));
  if (withImage && live.withPreview && record.previewSrc) {
    live.img.src = record.previewSrc;
    live.img.style.display = "block";
  }
  renderStatus(live);
  if (firstRun) growToFit(node);
  node.setDirtyCanvas?.(true, false);
}

function latestRun() {
  let last = null;
  for (const record of state.runs.values()) last = record;
  return last;
}

function remember(d) {
  let record = state.runs.get(d.run);
  if (!record) {
    record = { run: d.run, node: d.node, numBlocks: d.num_blocks, blocks: [], memory: null, previewSrc: null };
    state.runs.set(d.run, record);
    while (state.runs.size > MAX_RUNS) state.runs.delete(state.runs.keys().next().value);
  }
  const t = d.timings ?? {};
  const denoise = t.denoise_s != null ? t.denoise_s * 1000 : null;
  const decode = t.decode_s != null ? t.decode_s * 1000 : null;
  const total = Object.entries(t).filter(([k, v]) => k.endsWith("_s") && typeof v === "number")
    .reduce((sum, [, v]) => sum + v * 1000, 0);
  record.numBlocks = d.num_blocks ?? record.numBlocks;
  record.blocks.push({ block: d.block, ms: total, denoise_ms: denoise, decode_ms: decode });
  if (record.blocks.length > 4 * MAX_BARS) record.blocks.splice(0, record.blocks.length - MAX_BARS);
  record.memory = d.memory ?? record.memory;
  if (d.preview) {
    const p = d.preview;
    const query = new URLSearchParams({
      filename: p.filename, subfolder: p.subfolder ?? "", type: p.type ?? "temp", rand: `${d.run}_${d.block}`,
    });
    record.previewSrc = api.apiURL(`/view?${query}`);
  }
  return record;
}

function onBlock(event) {
  const d = event.detail;
  if (!d || d.block == null) return;
  state.events += 1;
  state.lastEvent = d;
  state.running = true;
  const record = remember(d);
  const source = findNode(d.node);
  if (!source) return;
  render(source, record, false);
  for (const node of downstreamLiveNodes(source)) render(node, record, true);
}

// ---- live keyboard/mouse control of a running Block Denoise (Matrix-Game 2.0) ----------------------
function keyName(e) {
  return e.code && e.code.startsWith("Key") ? e.code.slice(3) : e.key.toUpperCase();
}

function postControl(events) {
  const s = state.steering;
  if (!s || !events.length) return;
  api.fetchApi(CONTROL_ROUTE, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ node: s.node, events }) })
    .then((r) => { if (!r.ok) state.controlErrors += 1; })
    .catch(() => { state.controlErrors += 1; });
}

function onSteerKey(e) {
  const s = state.steering;
  if (!s) return;
  const k = keyName(e);
  if (e.type === "keydown" && k === "ESCAPE") { stopSteering(); return; }
  if (!s.keyset.has(k)) return;
  e.preventDefault();
  e.stopPropagation(); // keep ComfyUI's shortcuts out of the way while steering
  const i = s.held.indexOf(k);
  if (e.type === "keydown" && !e.repeat && i < 0) s.held.push(k);
  else if (e.type === "keyup" && i >= 0) s.held.splice(i, 1);
  else return;
  s.button.textContent = s.held.length ? s.held.join("+") : "Steering (Esc)";
  postControl([{ type: "control", keys: [...s.held] }]);
}

function onSteerMove(e) {
  const s = state.steering;
  if (s && document.pointerLockElement === s.root) { s.dx += e.movementX; s.dy += e.movementY; }
}

function startSteering(nodeId, root, button) {
  const controls = state.controls.get(nodeId);
  if (!controls) return;
  const clamp = (v) => Math.max(-LOOK_MAX_PX, Math.min(LOOK_MAX_PX, v));
  const s = { node: nodeId, root, button, held: [], dx: 0, dy: 0, controls,
    keyset: new Set([...Object.keys(controls.keys), ...controls.camera_keys]) };
  s.timer = setInterval(() => {
    if (!s.dx && !s.dy) return;
    const look = [clamp(s.dx), controls.look_pitch ? clamp(s.dy) : 0];
    s.dx = 0; s.dy = 0;
    if (look[0] || look[1]) postControl([{ type: "control", look }]);
  }, LOOK_PERIOD_MS);
  state.steering = s;
  button.dataset.on = "true";
  button.textContent = "Steering (Esc)";
  button.title = "Keys: " + Object.entries(controls.keys).map(([k, c]) => `${k} ${c}`).join(", ")
    + (controls.camera_keys.length ? `; ${controls.camera_keys.join("/")} turn` : "")
    + (controls.mouse ? "; the mouse turns the camera" : "");
  window.addEventListener("keydown", onSteerKey, true);
  window.addEventListener("keyup", onSteerKey, true);
  document.addEventListener("mousemove", onSteerMove);
  if (controls.mouse && root.requestPointerLock) root.requestPointerLock();
}

function stopSteering() {
  const s = state.steering;
  if (!s) return;
  if (s.held.length) postControl([{ type: "control", keys: [] }]);
  clearInterval(s.timer);
  window.removeEventListener("keydown", onSteerKey, true);
  window.removeEventListener("keyup", onSteerKey, true);
  document.removeEventListener("mousemove", onSteerMove);
  if (document.pointerLockElement === s.root) document.exitPointerLock();
  s.button.dataset.on = "false";
  s.button.textContent = "Control";
  state.steering = null;
}

function onControls(event) {
  const d = event.detail;
  if (!d || d.node == null || !d.controls) return;
  state.controls.set(String(d.node), d.controls);
}

function forEachLiveNode(fn) {
  for (const node of app.graph?._nodes ?? app.graph?.nodes ?? []) if (node.inferixLive) fn(node.inferixLive, node);
}

function onRunEnd(status) {
  stopSteering();
  state.controls.clear();
  if (!state.running && status === "done") return;
  const record = latestRun();
  if (record && state.running) record.status = status;
  state.running = false;
  state.interruptRequested = false;
  forEachLiveNode((live, node) => {
    renderStatus(live);
    node.setDirtyCanvas?.(true, false);
  });
}

const extension = {
  name: "inferix.live",
  state,
  setup() {
    api.addEventListener(EVENT, onBlock);
    api.addEventListener(CONTROLS_EVENT, onControls);
    document.addEventListener("pointerlockchange", () => {
      const s = state.steering;
      if (s && s.controls.mouse && document.pointerLockElement !== s.root) stopSteering(); // Esc released it
    });
    api.addEventListener("execution_start", (event) => {
      state.promptId = event.detail?.prompt_id ?? null;
      state.interruptRequested = false;
    });
    api.addEventListener("execution_success", () => onRunEnd("done"));
    api.addEventListener("execution_interrupted", () => onRunEnd("interrupted"));
    api.addEventListener("execution_error", () => onRunEnd("error"));
    api.addEventListener("executing", (event) => {
      if (event.detail == null) onRunEnd("done"); // older servers end a prompt with executing: null
    });
  },
  nodeCreated(node) {
    if (LIVE_TYPES.has(node.comfyClass)) ensureLiveWidget(node);
  },
};

app.registerExtension(extension);
