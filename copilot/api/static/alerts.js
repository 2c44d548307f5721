// The "Alerts" panel: the past-incident answers kept for Alertmanager's alerts (GET /v1/alerts),
// loaded when the panel is opened and by its Refresh button. Every server value reaches the page
// as text (dom.js's h), never as HTML.

import { formatDate, h } from "./dom.js";

const STATES = { answering: "answering…", answered: "answered", failed: "failed" };

function alertHost(labels) {
  for (const name of ["host", "hostname", "nodename", "node", "instance", "server"]) {
    if (labels[name]) return labels[name];
  }
  return null;
}

function alertItem(alert) {
  const host = alertHost(alert.labels || {});
  const answer = alert.answer || {};
  const head = h("p", { className: "alert-head" },
    h("strong", null, alert.alertname || "alert"), host ? ` on ${host}` : "",
    h("span", { className: `alert-state ${alert.state}` }, ` · ${alert.status} · ${STATES[alert.state] || alert.state}`),
    h("span", { className: "alert-time" }, ` · since ${formatDate(alert.starts_at) || "?"}`));
  const body = [head, h("p", { className: "alert-question" }, alert.question)];
  if (alert.state === "answered") {
    if (answer.not_found) body.push(h("p", { className: "alert-none" }, "No earlier occurrence found in the records."));
    body.push(h("p", { className: "alert-answer" }, answer.answer || ""));
    const links = (answer.sources || []).map((s) => h("li", null,
      h("a", { className: "doc-link", href: s.url, "data-n": s.n }, `[${s.n}] ${s.title || s.doc_id}`)));
    if (links.length) body.push(h("ol", { className: "alert-sources" }, ...links));
  } else if (alert.error) {
    body.push(h("p", { className: "alert-error" }, alert.error));
  }
  return h("li", { className: "alert", "data-fingerprint": alert.fingerprint }, ...body);
}

// Wire the panel: `details` (the <details> element), `list` (its <ol>), `status` (a <p>),
// `refresh` (a button); `authHeaders()` gives the key's header, `openDocument(url)` shows a source.
export function alertsPanel({ details, list, status, refresh }, { authHeaders, openDocument, onKeyNeeded }) {
  async function load() {
    status.textContent = "Loading…";
    let resp;
    try {
      resp = await fetch("/v1/alerts?limit=20", { headers: authHeaders() });
    } catch (err) {
      status.textContent = `Could not reach the server: ${err.message}`;
      return;
    }
    if (resp.status === 401) onKeyNeeded();
    if (!resp.ok) {
      status.textContent = `Could not load the alerts (HTTP ${resp.status}).`;
      return;
    }
    const page = await resp.json();
    list.replaceChildren(...page.alerts.map(alertItem));
    status.textContent = page.total ? `${page.total} alert(s), newest first.`
      : "No alerts yet: point an Alertmanager receiver at /v1/alerts/alertmanager.";
  }
  details.addEventListener("toggle", () => { if (details.open) load(); });
  refresh.addEventListener("click", load);
  list.addEventListener("click", (e) => {
    const link = e.target.closest("a.doc-link");
    if (!link || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    openDocument(link.href);
  });
  return { load };
}
