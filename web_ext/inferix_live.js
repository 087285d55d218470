// Inferix live view: shows each finished block inside the running node and its Stream Out nodes.
//
// The server sends an `inferix.block` websocket event per block (nodes/comfy_runtime.py, BlockHooks):
// {node, run, block, num_blocks, timings: {denoise_s, decode_s}, memory: {...}, preview: {filename, subfolder, type}}.
// We draw the preview JPEG and a one-line timing/memory panel in a DOM widget; nothing global is patched.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const EVENT = "inferix.block";
const LIVE_TYPES = new Set(["InferixBlockDenoise", "InferixVAEDecode", "InferixStreamOut"]);

function formatBytes(bytes) {
  if (bytes == null) return "";
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(2)} GiB` : `${(bytes / 2 ** 20).toFixed(0)} MiB`;
}

function panelText(d) {
  const t = d.timings || {};
  const parts = [`block ${d.block + 1}/${d.num_blocks}`];
  if (t.denoise_s != null) parts.push(`denoise ${(t.denoise_s * 1000).toFixed(0)} ms`);
  if (t.decode_s != null) parts.push(`decode ${(t.decode_s * 1000).toFixed(0)} ms`);
  const mem = d.memory || {};
  const kv = mem.kv_gpu_bytes ?? mem.gpu_bytes;
  if (kv != null) parts.push(`KV ${formatBytes(kv)}${mem.kv_host_bytes ? ` (+${formatBytes(mem.kv_host_bytes)} host)` : ""}`);
  return parts.join(" · ");
}

function findNode(id) {
  if (id == null) return null;
  const last = String(id).split(":").pop(); // ids inside subgraphs look like "12:5"
  return app.graph?.getNodeById(Number(last)) ?? null;
}

function getLink(graph, linkId) {
  if (linkId == null) return null;
  return graph.links?.get ? graph.links.get(linkId) : graph.links?.[linkId];
}

// Stream Out (and other live) nodes fed directly by `source`.
function downstreamLiveNodes(source) {
  const graph = app.graph;
  const found = [];
  for (const node of graph?._nodes ?? []) {
    if (node === source || !LIVE_TYPES.has(node.comfyClass)) continue;
    for (const input of node.inputs ?? []) {
      if (getLink(graph, input.link)?.origin_id === source.id) {
        found.push(node);
        break;
      }
    }
  }
  return found;
}

function ensureLiveWidget(node) {
  if (node.inferixLive) return node.inferixLive;
  const root = document.createElement("div");
  root.className = "inferix-live";
  root.style.cssText = "display:flex;flex-direction:column;gap:4px;font:11px sans-serif;color:var(--input-text,#ddd)";
  const img = document.createElement("img");
  img.style.cssText = "max-width:100%;max-height:100%;object-fit:contain;display:none";
  const info = document.createElement("div");
  info.style.cssText = "opacity:0.8;white-space:nowrap;overflow:hidden;text-overflow:ellipsis";
  root.append(img, info);
  node.addDOMWidget?.("inferix_live", "inferix_live", root, { serialize: false, hideOnZoom: false });
  node.inferixLive = { root, img, info };
  return node.inferixLive;
}

function show(node, d) {
  const live = ensureLiveWidget(node);
  if (d.preview) {
    const p = d.preview;
    const query = new URLSearchParams({ filename: p.filename, subfolder: p.subfolder ?? "", type: p.type ?? "temp" });
    live.img.src = api.apiURL(`/view?${query}&rand=${d.run}_${d.block}`);
    live.img.style.display = "block";
  }
  live.info.textContent = panelText(d);
  node.setDirtyCanvas?.(true, false);
}

app.registerExtension({
  name: "inferix.live",
  setup() {
    api.addEventListener(EVENT, (event) => {
      const d = event.detail;
      const source = findNode(d?.node);
      if (!source) return;
      show(source, d);
      for (const node of downstreamLiveNodes(source)) show(node, d);
    });
  },
  nodeCreated(node) {
    if (LIVE_TYPES.has(node.comfyClass)) ensureLiveWidget(node);
  },
});
