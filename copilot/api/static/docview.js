// The document view: "Open document" fetches GET /v1/documents/{id} with the page's API key
// (a plain link cannot send it) and shows the document in a modal dialog: title, type, key,
// date, source and its text, reassembled from the stored chunks, with the source's evidence
// lines marked. All of it as text (no HTML from the document is ever interpreted).

import { copyButton, docTypeName, formatDate, h } from "./dom.js";

const MIN_OVERLAP = 12; // characters: a shorter common run between two chunks is not taken for their overlap

// A chunk's text without its first line, the document header every chunk repeats.
function chunkBody(text) {
  const newline = text.indexOf("\n");
  return newline < 0 ? "" : text.slice(newline + 1);
}

function chunkIndex(chunk) {
  const n = Number(String(chunk.chunk_id).split("#").pop());
  return Number.isInteger(n) ? n : 0;
}

// Characters the end of `a` shares with the start of `b` (consecutive chunks overlap).
function overlap(a, b) {
  for (let k = Math.min(a.length, b.length); k >= MIN_OVERLAP; k--) {
    if (a.endsWith(b.slice(0, k))) return k;
  }
  return 0;
}

// The document's text from its chunks: headers dropped, overlaps merged, in chunk order.
export function documentText(chunks) {
  const pieces = [...chunks].filter((c) => c && typeof c.text === "string")
    .sort((a, b) => chunkIndex(a) - chunkIndex(b)).map((c) => chunkBody(c.text));
  let text = "";
  for (const piece of pieces) {
    if (!piece) continue;
    if (!text) { text = piece; continue; }
    const k = overlap(text, piece);
    text += k ? piece.slice(k) : "\n" + piece;
  }
  return text;
}

// `text` as nodes, with the evidence lines found in it as <mark>s.
function markedText(text, lines) {
  const ranges = lines.map((line) => ({ start: text.indexOf(line), length: line.length }))
    .filter((r) => r.start >= 0 && r.length).sort((a, b) => a.start - b.start);
  const nodes = [];
  let last = 0;
  for (const { start, length } of ranges) {
    if (start < last) continue;
    nodes.push(text.slice(last, start), h("mark", { className: "evidence" }, text.slice(start, start + length)));
    last = start + length;
  }
  nodes.push(text.slice(last));
  return nodes.filter((n) => n !== "");
}

function metaList(doc) {
  const rows = [["Type", docTypeName(doc.doc_type)], ["Key", doc.key], ["Written", formatDate(doc.created)],
    ["Source", doc.source], ["Chunks", doc.n_chunks]];
  return rows.filter(([, value]) => value !== null && value !== undefined && value !== "")
    .flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, String(value))]);
}

async function errorText(resp) {
  let message = "";
  try {
    const body = await resp.json();
    message = (body && body.error && body.error.message) || (typeof body.detail === "string" ? body.detail : "");
  } catch { /* not JSON */ }
  if (resp.status === 401 || resp.status === 403) return "This server needs a valid API key: enter it in the API key field.";
  // 404 also answers a document outside the key's scope (the server does not say which)
  if (resp.status === 404) {
    return "The document is no longer in the store, or this API key may not read it" + (message ? ` (${message}).` : ".");
  }
  return `The document could not be loaded (${resp.status})` + (message ? `: ${message}` : ".");
}

// The view in `dialog` (index.html's #doc-view). authHeaders() -> headers for the request;
// onKeyNeeded() is called on a 401/403. Returns open(url, source).
export function documentView(dialog, { authHeaders, onKeyNeeded }) {
  const title = dialog.querySelector(".doc-title");
  const meta = dialog.querySelector(".doc-meta");
  const status = dialog.querySelector(".doc-status");
  const body = dialog.querySelector(".doc-text");
  const tools = dialog.querySelector(".doc-tools");
  let current = 0; // the latest open() wins

  dialog.querySelector(".doc-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("click", (e) => { if (e.target === dialog) dialog.close(); }); // the backdrop

  function show(state, heading, message) {
    dialog.dataset.state = state; // loading | ready | error (tests wait on it)
    title.textContent = heading;
    status.textContent = message;
    status.hidden = !message;
  }

  function render(doc, source) {
    const text = documentText(Array.isArray(doc.chunks) ? doc.chunks : []);
    show("ready", doc.title || doc.doc_id || "Untitled document", text ? "" : "This document has no text.");
    meta.replaceChildren(...metaList(doc));
    body.replaceChildren(...markedText(text, source ? source.highlights || [] : []));
    tools.replaceChildren(text ? copyButton(text, "document text") : "");
  }

  return async function open(url, source) {
    const token = ++current;
    show("loading", (source && source.title) || "Document", "Loading…");
    meta.replaceChildren();
    body.replaceChildren();
    tools.replaceChildren();
    if (!dialog.open) dialog.showModal();
    try {
      const resp = await fetch(url, { headers: { Accept: "application/json", ...authHeaders() } });
      if (token !== current) return;
      if (!resp.ok) {
        if (resp.status === 401 || resp.status === 403) onKeyNeeded();
        show("error", (source && source.title) || "Document", await errorText(resp));
        return;
      }
      render(await resp.json(), source);
    } catch (err) {
      if (token === current) show("error", "Document", `Could not reach the server: ${err && err.message ? err.message : err}`);
    }
  };
}
