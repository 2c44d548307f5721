// Source cards: title, date, key, type, path, the evidence lines (each with a copy button) or
// the snippet, and the "Open document" link (the page opens it in its document view).

import { copyButton, docTypeName, formatDate, h } from "./dom.js";

// The document's URL when it is http(s) (no javascript: / data:), else null.
export function documentHref(s) {
  const raw = typeof s.url === "string" && s.url ? s.url : "/v1/documents/" + encodeURIComponent(String(s.doc_id));
  try {
    const url = new URL(raw, window.location.href);
    if (url.protocol === "http:" || url.protocol === "https:") return url.href;
  } catch { /* fall through */ }
  return null;
}

// The source's evidence lines (non-empty strings only).
export function highlightsOf(s) {
  return Array.isArray(s.highlights) ? s.highlights.filter((line) => typeof line === "string" && line.trim()) : [];
}

// The reasons the server marked evidence line `i` of `s` as holding a destructive command.
function destructiveReasons(s, i) {
  const marks = Array.isArray(s.destructive) ? s.destructive : [];
  return marks.filter((m) => m && m.highlight === i).map((m) => `${m.command}: ${m.reason}`);
}

function evidenceLine(n, i, line, reasons = []) {
  const badge = reasons.length > 0 && h("span", { className: "destructive-badge", title: reasons.join("\n") },
    "⚠ destructive command — do not run");
  return h("li", { id: `source-${n}-line-${i}`, className: reasons.length ? "destructive" : "" }, badge,
    h("span", { className: "line-text" }, line), copyButton(line, `evidence line ${i + 1} of source ${n}`));
}

export function sourceCard(s) {
  const n = Number(s.n);
  const titleId = `source-${n}-title`;
  const date = formatDate(s.created);
  const docType = docTypeName(s.doc_type);
  const key = s.key === null || s.key === undefined || s.key === "" ? null
    : (s.doc_type === "elog" ? `MID ${s.key}` : String(s.key));
  const meta = h("p", { className: "meta" },
    date && h("time", { datetime: s.created }, date),
    key && h("span", { className: "key" }, key),
    docType && h("span", {}, docType),
    s.source && h("span", { className: "path", title: String(s.source) }, String(s.source)));

  const highlights = highlightsOf(s);
  const body = highlights.length
    ? h("ul", { className: "highlights", "aria-label": "Matching lines" }, ...highlights.map((l, i) => evidenceLine(n, i, l, destructiveReasons(s, i))))
    : h("p", { className: "snippet" }, s.snippet || "");

  const href = documentHref(s);
  const score = Number(s.score);
  const foot = h("p", { className: "card-foot" },
    href && h("a", { href, target: "_blank", rel: "noopener noreferrer", className: "doc-link", "data-n": n },
      "Open document"),
    Number.isFinite(score) && h("span", { className: "score", title: "retrieval score" }, `score ${score.toFixed(3)}`));

  return h("li", { id: `source-${n}`, className: "card", tabindex: "-1", "aria-labelledby": titleId, "data-n": n },
    h("div", { className: "card-head" },
      h("span", { className: "num", "aria-hidden": "true" }, `[${n}]`),
      h("h3", { id: titleId, className: "title" },
        h("span", { className: "visually-hidden" }, `Source ${n}: `), s.title || String(s.doc_id || "untitled")),
      h("span", { className: "badge", hidden: true }, "Cited")),
    meta, body, foot);
}

// Mark the cards whose number is in `cited` (a Set).
export function markCited(list, cited) {
  for (const card of list.querySelectorAll(".card")) {
    const on = cited.has(Number(card.dataset.n));
    card.classList.toggle("cited", on);
    card.querySelector(".badge").hidden = !on;
  }
}

// Scroll to a card and flash it (and one of its evidence lines, when `line` is an index).
export function focusSource(list, n, line) {
  const card = document.getElementById(`source-${n}`);
  if (!card) return;
  const smooth = !window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  card.scrollIntoView({ behavior: smooth ? "smooth" : "auto", block: "nearest" });
  for (const other of list.querySelectorAll(".card.flash")) other.classList.remove("flash");
  void card.offsetWidth; // restart the animation
  card.classList.add("flash");
  card.focus({ preventScroll: true });
  const row = line === undefined || line === "" ? null : document.getElementById(`source-${n}-line-${line}`);
  if (row) {
    row.classList.remove("flash");
    void row.offsetWidth;
    row.classList.add("flash");
  }
}
