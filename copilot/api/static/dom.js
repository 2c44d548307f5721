// DOM helpers of the question page. Every value from the server reaches the page through
// these (createElement, textContent, setAttribute), never as HTML: titles, snippets, answers
// and documents are untrusted text.

export const DOC_TYPES = {
  elog: "ELOG entry", shiftlog: "Shift log", postmortem: "Post-mortem", jira: "Jira ticket",
  csv_ticket: "Ticket", jsonl: "Record", text: "Text",
};

// An element with attributes (className, hidden, anything else as an attribute) and children
// (nodes, or values added as text).
export function h(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "className") node.className = value;
    else if (name === "hidden") node.hidden = true;
    else node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// "2026-01-20 06:04" from an ISO 8601 date-time (the date alone when no time is given).
export function formatDate(created) {
  if (typeof created !== "string" || !created) return null;
  const m = created.match(/^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}))?/);
  return m ? (m[2] ? `${m[1]} ${m[2]}` : m[1]) : created;
}

// A document type's name for people ("ELOG entry"), the raw value for unknown ones.
export function docTypeName(docType) {
  return docType ? DOC_TYPES[docType] || String(docType) : null;
}

// Put text on the clipboard: the Clipboard API where the page is a secure context (https,
// localhost), else a selected off-screen textarea and the copy command (plain http).
// Resolves to true when the text was copied.
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch { /* denied: try the copy command */ }
  }
  const buffer = h("textarea", { className: "copy-buffer", readonly: "", "aria-hidden": "true", tabindex: "-1" });
  buffer.value = text;
  document.body.append(buffer);
  buffer.select();
  let copied = false;
  try { copied = document.execCommand("copy"); } catch { copied = false; }
  buffer.remove();
  return copied;
}

// A "Copy" button for `text`; its data-state says what the last click did (copied | failed).
export function copyButton(text, what = "") {
  const label = what ? `Copy ${what}` : `Copy ${text}`;
  const button = h("button", { type: "button", className: "copy", "aria-label": label, title: label }, "Copy");
  let reset = null;
  button.addEventListener("click", async (e) => {
    e.preventDefault();
    e.stopPropagation();
    const copied = await copyText(text);
    button.dataset.state = copied ? "copied" : "failed";
    button.textContent = copied ? "Copied" : "Select and copy";
    button.focus({ preventScroll: true });
    clearTimeout(reset);
    reset = setTimeout(() => { button.textContent = "Copy"; }, 2500);
  });
  return button;
}
