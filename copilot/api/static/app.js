// OpsCopilot question page: asks POST /v1/ask with "stream": true (the conversation so far as
// "history", the filters as "filters") and renders the Server-Sent Events it answers
// (sources, delta..., done | error); 👍/👎 go to POST /v1/feedback; "Open document" shows
// GET /v1/documents/{id} in the document view.
//
// Every value from the server is put on the page with textContent / createElement /
// setAttribute (see dom.js), never as HTML: titles, snippets and answers are untrusted text.

import { alertsPanel } from "./alerts.js";
import { answerNodes, citedFromText } from "./answer.js";
import { Conversation } from "./conversation.js";
import { documentView } from "./docview.js";
import { h } from "./dom.js";
import { feedbackControls } from "./feedback.js";
import { focusSource, markCited, sourceCard } from "./sources.js";
import { sseEvents } from "./sse.js";

const KEY_STORAGE = "opscopilot.apiKey";
const NEW_CONVERSATION = "new conversation"; // the abort reason when the conversation is cleared
const FINISH = {
  eos: "finished",
  stop: "finished at a stop sequence",
  length: "stopped: reached the token limit",
  repetition: "stopped: the model started repeating itself",
  cancelled: "cancelled",
};

const $ = (id) => document.getElementById(id);
const ui = {
  form: $("ask-form"), question: $("question"), ask: $("ask-button"), stop: $("stop-button"),
  newConversation: $("new-conversation"), maxSources: $("max-sources"), maxNew: $("max-new-tokens"), docType: $("doc-type"),
  since: $("since"), until: $("until"), keyPanel: $("key-panel"), key: $("api-key"), forgetKey: $("forget-key"),
  error: $("error"), conversation: $("conversation"), turns: $("turns"), asked: $("asked"), answer: $("answer"),
  feedback: $("feedback"), stats: $("stats"), sources: $("sources"), sourcesCount: $("sources-count"),
  docView: $("doc-view"),
};

const conversation = new Conversation(ui.conversation, ui.turns);
const openDocument = documentView(ui.docView, { authHeaders, onKeyNeeded: () => showKeyPanel(false) });

const state = {
  question: "",          // the question being answered
  settings: {},          // what it was asked with: max_sources, max_new_tokens, filters
  history: [],           // the earlier turns sent with it
  answer: "",            // the answer text so far (the final one once done)
  sources: new Map(),    // n -> source
  serverCited: null,     // Set of n the server says are cited (done.cited / source.cited), if it said
  quotes: [],            // done.quotes: literals found in a source (answer offsets, source n, evidence line)
  unverified: [],        // done.unverified: literals found in no source
  destructive: [],       // done.destructive: destructive commands in the answer
  notFound: false,       // done.not_found: the sources do not answer the question
  finished: null,        // the exchange once done: kept in the conversation when the next question is asked
  streaming: false,
  failed: false,         // the request failed: no "no answer" placeholder
  controller: null,      // AbortController of the request in flight
  renderQueued: false,
};

function setPhase(phase) {
  document.documentElement.dataset.state = phase; // idle | streaming | done | error (tests wait on it)
}

// ---------------------------------------------------------------- API key (kept in localStorage)
function storedKey() {
  try { return localStorage.getItem(KEY_STORAGE) || ""; } catch { return ""; }
}

function storeKey(value) {
  try {
    if (value) localStorage.setItem(KEY_STORAGE, value);
    else localStorage.removeItem(KEY_STORAGE);
  } catch { /* storage disabled: the key still works for this page */ }
}

function authHeaders() {
  const key = ui.key.value.trim() || storedKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

function showKeyPanel(focus) {
  ui.keyPanel.hidden = false;
  if (focus) ui.key.focus();
}

// ---------------------------------------------------------------- errors
function detailLines(detail) {
  if (typeof detail === "string") return detail ? [detail] : [];
  if (Array.isArray(detail)) { // pydantic validation errors: [{loc, msg, type}, ...]
    return detail.map((e) => {
      if (!e || typeof e !== "object") return String(e);
      const loc = Array.isArray(e.loc) ? e.loc.filter((p) => p !== "body").join(".") : "";
      const msg = typeof e.msg === "string" ? e.msg : JSON.stringify(e);
      return loc ? `${loc}: ${msg}` : msg;
    });
  }
  if (detail && typeof detail === "object") return [JSON.stringify(detail)];
  return [];
}

function showError(title, lines = []) {
  ui.error.replaceChildren(h("p", { className: "error-title" }, title));
  if (lines.length === 1) ui.error.append(h("p", {}, lines[0]));
  else if (lines.length > 1) ui.error.append(h("ul", {}, ...lines.map((l) => h("li", {}, l))));
  ui.error.hidden = false;
}

function clearError() {
  ui.error.hidden = true;
  ui.error.replaceChildren();
}

async function showHttpError(resp) {
  let detail = null;
  try {
    const body = await resp.json();
    detail = body && (body.detail ?? (body.error && body.error.message));
  } catch { /* not JSON */ }
  const lines = detailLines(detail);
  let title = `The request failed (${resp.status}${resp.statusText ? " " + resp.statusText : ""}).`;
  if (resp.status === 401) {
    title = "This server needs an API key: enter it in the API key field and ask again.";
    showKeyPanel(true);
  } else if (resp.status === 403) {
    title = "The API key was not accepted: check the API key field and ask again.";
    showKeyPanel(true);
  } else if (resp.status === 400 || resp.status === 422) {
    title = "The question could not be asked:";
  } else if (resp.status === 503) {
    const retry = resp.headers.get("Retry-After");
    title = "The server is busy" + (retry ? `; try again in ${retry} s.` : "; try again shortly.");
  }
  showError(title, lines);
}

// ---------------------------------------------------------------- answer and sources
function cited() {
  return state.serverCited || citedFromText(state.answer, state.sources);
}

function renderAnswer() {
  state.renderQueued = false;
  if (!state.question) return; // the conversation was cleared: the page shows its placeholder
  const done = !state.streaming;
  const nodes = answerNodes(state.answer, state.sources, done ? state.quotes : [], done ? state.unverified : []);
  if (state.notFound) nodes.unshift(h("p", { className: "not-found" }, "The sources do not answer this question."));
  const flagged = [...new Set(state.unverified.map((u) => u.literal))];
  if (done && flagged.length) {
    nodes.push(h("p", { className: "unverified-list" }, "Not in the sources — check before running: ",
      ...flagged.flatMap((l, i) => [i ? ", " : "", h("code", {}, l)])));
  }
  const wipes = [...new Set(state.destructive.map((d) => String(d.command)))];
  if (done && wipes.length) {
    nodes.push(h("p", { className: "destructive-list", role: "alert" }, "⚠ Destructive command in the answer — do not run: ",
      ...wipes.flatMap((c, i) => [i ? ", " : "", h("code", {}, c)])));
  }
  if (state.streaming) nodes.push(h("span", { className: "caret", "aria-hidden": "true" }));
  else if (!state.answer && !state.failed) nodes.push(h("span", { className: "placeholder" }, "(The model gave no answer.)"));
  ui.answer.replaceChildren(...nodes);
  markCited(ui.sources, cited());
}

function queueRender() {
  if (state.renderQueued) return;
  state.renderQueued = true;
  requestAnimationFrame(renderAnswer);
}

function renderSources(list) {
  const sources = Array.isArray(list) ? list.filter((s) => s && typeof s === "object") : [];
  state.sources = new Map(sources.map((s) => [Number(s.n), s]));
  if (sources.some((s) => typeof s.cited === "boolean") && state.serverCited === null && !state.streaming) {
    state.serverCited = new Set(sources.filter((s) => s.cited).map((s) => Number(s.n)));
  }
  ui.sources.replaceChildren(...sources.map(sourceCard));
  ui.sourcesCount.textContent = sources.length ? `(${sources.length})` : "";
  if (!sources.length && !state.streaming) {
    ui.sources.append(h("li", { className: "placeholder" }, "No passages were found for this question."));
  }
}

// ---------------------------------------------------------------- stats
function formatMs(ms) {
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}

function statsText(stats) {
  if (!stats || typeof stats !== "object") return "";
  const parts = [];
  const tokens = Number(stats.new_tokens);
  if (Number.isFinite(tokens)) parts.push(`${tokens} token${tokens === 1 ? "" : "s"}`);
  const ms = Number(stats.total_ms);
  if (Number.isFinite(ms)) parts.push(formatMs(ms));
  const tau = Number(stats.tau);
  if (stats.tau !== undefined && stats.tau !== null && Number.isFinite(tau) && tau > 0) {
    parts.push(`${tau.toFixed(2)} tokens per target pass`);
  }
  if (stats.finish_reason) parts.push(FINISH[stats.finish_reason] || `finished: ${stats.finish_reason}`);
  return parts.join(" · ");
}

// ---------------------------------------------------------------- the exchange and its rating
// The finished exchange: what the conversation keeps and a rating sends.
function finishedExchange() {
  const citedNow = cited();
  return {
    question: state.question, settings: state.settings, history: state.history, answer: state.answer,
    sources: [...state.sources.values()], cited: citedNow, notFound: state.notFound,
    quotes: state.quotes.filter((q) => state.sources.has(Number(q.n)) && typeof q.literal === "string" && q.literal),
  };
}

// The POST /v1/feedback body for a rating of `exchange`.
function feedbackBody(exchange, rating, reason) {
  return {
    rating, reason, question: exchange.question, answer: exchange.answer, history: exchange.history,
    not_found: exchange.notFound, settings: exchange.settings,
    sources: exchange.sources.map((s) => ({ n: Number(s.n), doc_id: String(s.doc_id),
      title: s.title ? String(s.title).slice(0, 2000) : null, cited: exchange.cited.has(Number(s.n)) })),
    quotes: exchange.quotes.map((q) => ({ literal: q.literal, kind: String(q.kind || ""), n: Number(q.n),
      doc_id: String(q.doc_id) })),
  };
}

function sendFeedback(body) {
  return fetch("/v1/feedback", { method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json", Accept: "application/json", ...authHeaders() } });
}

function showFeedback(exchange) {
  ui.feedback.replaceChildren(feedbackControls({
    payload: (rating, reason) => feedbackBody(exchange, rating, reason), send: sendFeedback }));
}

// ---------------------------------------------------------------- asking
function optionalInt(input) {
  const raw = input.value.trim();
  if (!raw) return null;
  const n = Number(raw);
  return Number.isInteger(n) ? n : raw; // let the server explain a bad value
}

// The options the question is asked with (unset ones left out).
function requestSettings() {
  const settings = {};
  const maxSources = optionalInt(ui.maxSources);
  if (maxSources !== null) settings.max_sources = maxSources;
  const maxNew = optionalInt(ui.maxNew);
  if (maxNew !== null) settings.max_new_tokens = maxNew;
  const filters = {};
  if (ui.docType.value) filters.doc_types = [ui.docType.value];
  if (ui.since.value) filters.since = ui.since.value; // YYYY-MM-DD: from the start of that day (UTC)
  if (ui.until.value) filters.until = ui.until.value; // to its end
  if (Object.keys(filters).length) settings.filters = filters;
  return settings;
}

function setBusy(busy) {
  ui.ask.disabled = busy;
  ui.stop.hidden = !busy;
  ui.answer.setAttribute("aria-busy", busy ? "true" : "false");
}

// Start a new exchange: the finished one joins the conversation; the panels are emptied.
function beginExchange(question, settings) {
  if (state.finished) conversation.add(state.finished);
  Object.assign(state, { question, settings, history: conversation.messages(), answer: "", sources: new Map(),
    serverCited: null, quotes: [], unverified: [], destructive: [], notFound: false, finished: null, streaming: true, failed: false });
  ui.asked.replaceChildren(h("span", { className: "who" }, "You"), question);
  ui.asked.hidden = false;
  ui.feedback.replaceChildren();
  ui.sources.replaceChildren();
  ui.sourcesCount.textContent = "";
  ui.answer.dataset.deltas = "0";
  ui.stats.textContent = "Searching the logbooks…";
  renderAnswer();
  setPhase("streaming");
}

function handleDone(payload) {
  state.streaming = false;
  if (Array.isArray(payload.sources)) renderSources(payload.sources);
  if (typeof payload.answer === "string") state.answer = payload.answer; // final text: marks and cuts applied
  if (Array.isArray(payload.cited)) state.serverCited = new Set(payload.cited.map(Number));
  state.quotes = Array.isArray(payload.quotes) ? payload.quotes.filter((q) => q && typeof q === "object") : [];
  state.unverified = Array.isArray(payload.unverified) ? payload.unverified.filter((u) => u && typeof u === "object") : [];
  state.notFound = payload.not_found === true;
  state.destructive = Array.isArray(payload.destructive) ? payload.destructive.filter((d) => d && d.command) : [];
  renderAnswer();
  ui.stats.textContent = statsText(payload.stats);
  state.finished = finishedExchange();
  showFeedback(state.finished);
  ui.question.value = ""; // ready for a follow-up
  setPhase("done");
}

function fail(title, lines) {
  Object.assign(state, { streaming: false, failed: true });
  renderAnswer();
  if (title) showError(title, lines);
  ui.stats.textContent = "";
  setPhase("error");
}

// Read the event stream; true when it ended with done or error.
async function readEvents(resp, signal) {
  ui.stats.textContent = "Generating…";
  for await (const { event, data } of sseEvents(resp.body)) {
    if (signal.aborted) return true;
    let payload;
    try { payload = JSON.parse(data); } catch { continue; }
    if (!payload || typeof payload !== "object") continue;
    if (event === "sources") {
      renderSources(payload.sources);
      queueRender();
    } else if (event === "delta") {
      if (typeof payload.text === "string") state.answer += payload.text;
      ui.answer.dataset.deltas = String(Number(ui.answer.dataset.deltas || 0) + 1); // for tests and debugging
      queueRender();
    } else if (event === "done") {
      handleDone(payload);
      return true;
    } else if (event === "error") {
      fail("The answer could not be completed.", detailLines(payload.detail));
      return true;
    }
  }
  return false;
}

async function post(body, signal) {
  const resp = await fetch("/v1/ask", { method: "POST", body: JSON.stringify(body), signal,
    headers: { "Content-Type": "application/json", Accept: "text/event-stream", ...authHeaders() } });
  if (!resp.ok) {
    await showHttpError(resp);
    fail(null);
  } else if (!(resp.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
    handleDone(await resp.json()); // a server that answered whole: {answer, sources, stats}
  } else if (!await readEvents(resp, signal)) {
    fail("The connection closed before the answer was complete.");
  }
}

async function ask() {
  if (state.controller) return;
  const question = ui.question.value.trim();
  if (!question) {
    showError("Type a question first.");
    ui.question.focus();
    return;
  }
  const settings = requestSettings();
  clearError();
  beginExchange(question, settings);
  const body = { question, stream: true, ...settings };
  if (state.history.length) body.history = state.history;
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  try {
    await post(body, controller.signal);
  } catch (err) {
    if (controller.signal.reason === NEW_CONVERSATION) return; // the page was cleared meanwhile
    if (controller.signal.aborted) {
      Object.assign(state, { streaming: false, failed: true });
      renderAnswer();
      ui.stats.textContent = "Stopped.";
      setPhase("done");
    } else {
      fail("Could not reach the server.", [String(err && err.message ? err.message : err)]);
    }
  } finally {
    state.controller = null;
    state.streaming = false;
    setBusy(false);
  }
}

// Forget the conversation and empty the page (a request in flight is abandoned).
function newConversation() {
  if (state.controller) state.controller.abort(NEW_CONVERSATION);
  conversation.clear();
  Object.assign(state, { question: "", settings: {}, history: [], answer: "", sources: new Map(), serverCited: null,
    quotes: [], unverified: [], destructive: [], notFound: false, finished: null, streaming: false, failed: false });
  clearError();
  ui.asked.hidden = true;
  ui.asked.replaceChildren();
  ui.feedback.replaceChildren();
  ui.sources.replaceChildren();
  ui.sourcesCount.textContent = "";
  ui.stats.textContent = "";
  ui.answer.replaceChildren(h("p", { className: "placeholder" }, "Ask a question to see the answer here."));
  ui.question.value = "";
  ui.question.focus();
  setPhase("idle");
}

// ---------------------------------------------------------------- wiring
ui.form.addEventListener("submit", (e) => {
  e.preventDefault();
  ask();
});
ui.question.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    ui.form.requestSubmit();
  }
});
ui.stop.addEventListener("click", () => state.controller && state.controller.abort());
ui.newConversation.addEventListener("click", newConversation);
ui.key.addEventListener("input", () => storeKey(ui.key.value.trim()));
ui.forgetKey.addEventListener("click", () => {
  ui.key.value = "";
  storeKey("");
  ui.key.focus();
});
ui.answer.addEventListener("click", (e) => {
  const link = e.target.closest("a.cite, a.quote");
  if (!link) return;
  e.preventDefault();
  focusSource(ui.sources, Number(link.dataset.n), link.dataset.highlight);
});
for (const type of ["mouseover", "mouseout", "focusin", "focusout"]) {
  ui.answer.addEventListener(type, (e) => {
    const link = e.target.closest("a.cite, a.quote");
    const card = link && $(`source-${link.dataset.n}`);
    if (card) card.classList.toggle("linked", type === "mouseover" || type === "focusin");
  });
}
ui.sources.addEventListener("click", (e) => {
  const link = e.target.closest("a.doc-link");
  if (!link || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return; // a new tab: the raw JSON
  const url = new URL(link.href);
  if (url.origin !== window.location.origin || !url.pathname.startsWith("/v1/documents/")) return;
  e.preventDefault();
  openDocument(url.href, state.sources.get(Number(link.dataset.n)));
});

alertsPanel({ details: $("alerts-panel"), list: $("alerts"), status: $("alerts-status"), refresh: $("alerts-refresh") },
  { authHeaders, openDocument: (url) => openDocument(url), onKeyNeeded: () => showKeyPanel(true) });

const saved = storedKey();
if (saved) {
  ui.key.value = saved;
  showKeyPanel(false);
}
setPhase("idle");
