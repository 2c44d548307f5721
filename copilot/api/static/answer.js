// An answer as DOM nodes: code spans and fenced code blocks as code with a copy button,
// [n] citations of known sources as links to their cards, and (once the answer is done) the
// literals the server checked: quoted ones link to their evidence line, unverified ones are
// marked "not in the sources".

import { copyButton, h } from "./dom.js";

const CITATION = /\[(\d+(?:\s*,\s*\d+)*)\]/g; // [3] or [1, 2]; an invalid mark like [3?] is left as text
const CODE = /```[^\n`]*\n([\s\S]*?)\n?```|`([^`\n]+)`/g; // a fenced block, or an inline code span
const WARN = " (not in the sources — check before running)";

// The numbers of known sources that `text` cites.
export function citedFromText(text, sources) {
  const cited = new Set();
  for (const m of text.matchAll(CITATION)) {
    for (const part of m[1].split(",")) {
      const n = Number(part.trim());
      if (sources.has(n)) cited.add(n);
    }
  }
  return cited;
}

function citationLink(n, sources) {
  const source = sources.get(n);
  return h("a", {
    className: "cite", href: `#source-${n}`, "data-n": n,
    "aria-label": `[${n}]: source ${n}` + (source && source.title ? `, ${source.title}` : ""),
  }, `[${n}]`);
}

// Prose as text nodes, with every [n] that names a known source as a link to its card.
function citationNodes(text, sources) {
  const nodes = [];
  let last = 0;
  for (const m of text.matchAll(CITATION)) {
    const numbers = m[1].split(",").map((p) => Number(p.trim()));
    if (!numbers.every((n) => sources.has(n))) continue; // unknown source: plain text
    if (m.index > last) nodes.push(document.createTextNode(text.slice(last, m.index)));
    numbers.forEach((n, i) => {
      if (i > 0) nodes.push(document.createTextNode(" "));
      nodes.push(citationLink(n, sources));
    });
    last = m.index + m[0].length;
  }
  if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}

// Code segments of `text`: {block, start, end (the code), outerStart, outerEnd (with its fences)}.
function codeSegments(text) {
  return [...text.matchAll(CODE)].map((m) => {
    const block = m[1] !== undefined;
    const code = block ? m[1] : m[2];
    const start = m.index + (block ? m[0].indexOf("\n") + 1 : 1);
    return { block, start, end: start + code.length, outerStart: m.index, outerEnd: m.index + m[0].length };
  });
}

// The server's checked literals that fit the text, sorted, none overlapping another.
function validMarks(text, quotes, unverified) {
  const marks = [...quotes.map((q) => ({ ...q, verified: true })), ...unverified.map((u) => ({ ...u, verified: false }))]
    .map((m) => ({ ...m, start: Number(m.answer_start), end: Number(m.answer_end) }))
    .filter((m) => Number.isInteger(m.start) && Number.isInteger(m.end) && m.start < m.end && m.end <= text.length)
    .sort((a, b) => a.start - b.start);
  const kept = [];
  let last = 0;
  for (const mark of marks) {
    if (mark.start < last) continue;
    kept.push(mark);
    last = mark.end;
  }
  return kept;
}

// One checked literal: quoted (a link to its evidence line; a copy button on a command in
// prose) or unverified (marked; the warning follows it in prose, its code span in code).
function literalNode(text, mark, inCode) {
  if (mark.verified) {
    const link = h("a", {
      className: "quote", href: `#source-${mark.n}`, "data-n": mark.n,
      "data-highlight": Number.isInteger(mark.highlight) ? mark.highlight : "",
      title: `Quoted from source [${mark.n}]`,
    }, text);
    const command = !inCode && (mark.kind === "command" || mark.kind === "code");
    return h("span", { className: "literal verified" }, link, command && copyButton(text));
  }
  const marked = h("mark", { className: "unverified", title: "Not in the sources: check before running" }, text);
  return h("span", { className: "literal" }, marked, !inCode && h("span", { className: "warn" }, WARN));
}

// text[start, end) with the marks inside it; prose gets citation links, code does not.
function rangeNodes(text, start, end, marks, sources, inCode) {
  const plain = (a, b) => (inCode ? [document.createTextNode(text.slice(a, b))] : citationNodes(text.slice(a, b), sources));
  const nodes = [];
  let last = start;
  for (const mark of marks) {
    if (mark.start < start || mark.end > end) continue;
    if (mark.start > last) nodes.push(...plain(last, mark.start));
    nodes.push(literalNode(text.slice(mark.start, mark.end), mark, inCode));
    last = mark.end;
  }
  if (last < end) nodes.push(...plain(last, end));
  return nodes;
}

function codeNode(text, segment, marks, sources) {
  const code = text.slice(segment.start, segment.end);
  const inner = h("code", {}, ...rangeNodes(text, segment.start, segment.end, marks, sources, true));
  const unverified = marks.some((m) => !m.verified && m.start >= segment.start && m.end <= segment.end);
  const warn = unverified && h("span", { className: "warn" }, WARN);
  if (segment.block) return h("div", { className: "code-block" }, h("pre", {}, inner), copyButton(code, "code"), warn);
  return h("span", { className: "code-span" }, inner, copyButton(code), warn);
}

// The nodes of an answer. sources: Map n -> source; quotes / unverified: the done event's
// (empty while streaming).
export function answerNodes(text, sources, quotes = [], unverified = []) {
  const marks = validMarks(text, quotes, unverified);
  const nodes = [];
  let last = 0;
  for (const segment of codeSegments(text)) {
    nodes.push(...rangeNodes(text, last, segment.outerStart, marks, sources, false),
      codeNode(text, segment, marks, sources));
    last = segment.outerEnd;
  }
  nodes.push(...rangeNodes(text, last, text.length, marks, sources, false));
  return nodes;
}
