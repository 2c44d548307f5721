// OpsCopilot question page: asks POST /v1/ask with "stream": true and renders the
// Server-Sent Events it answers (sources, delta..., done | error).
//
// Every value from the server is put on the page with textContent / createElement /
// setAttribute, never as HTML: titles, snippets and answers are untrusted text.
"use strict";

(() => {
  const KEY_STORAGE = "opscopilot.apiKey";
  const CITATION = /\[(\d+(?:\s*,\s*\d+)*)\]/g; // [3] or [1, 2]; an invalid mark like [3?] is left as text
  const FINISH = {
    eos: "finished",
    stop: "finished at a stop sequence",
    length: "stopped: reached the token limit",
    repetition: "stopped: the model started repeating itself",
    cancelled: "cancelled",
  };
  const DOC_TYPES = {
    elog: "ELOG entry", shiftlog: "Shift log", postmortem: "Post-mortem", jira: "Jira ticket",
    csv_ticket: "Ticket", jsonl: "Record", text: "Text",
  };

  const $ = (id) => document.getElementById(id);
  const ui = {
    form: $("ask-form"), question: $("question"), ask: $("ask-button"), stop: $("stop-button"),
    topK: $("top-k"), maxNew: $("max-new-tokens"), keyPanel: $("key-panel"), key: $("api-key"),
    forgetKey: $("forget-key"), error: $("error"), answer: $("answer"), stats: $("stats"),
    sources: $("sources"), sourcesCount: $("sources-count"),
  };

  const state = {
    answer: "",            // the answer text so far (the final one once done)
    sources: new Map(),    // n -> source
    serverCited: null,     // Set of n the server says are cited (done.cited / source.cited), if it said
    quotes: [],            // done.quotes: literals found in a source (answer offsets, source n, evidence line)
    unverified: [],        // done.unverified: literals found in no source
    notFound: false,       // done.not_found: the sources do not answer the question
    streaming: false,
    failed: false,         // the request failed: no "no answer" placeholder
    controller: null,      // AbortController of the request in flight
    renderQueued: false,
  };

  // ---------------------------------------------------------------- DOM helpers (text only)
  function h(tag, props, ...children) {
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

  function currentKey() {
    return ui.key.value.trim() || storedKey();
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
    } else if (resp.status === 422) {
      title = "The question could not be asked:";
    } else if (resp.status === 503) {
      const retry = resp.headers.get("Retry-After");
      title = "The server is busy" + (retry ? `; try again in ${retry} s.` : "; try again shortly.");
    }
    showError(title, lines);
  }

  // ---------------------------------------------------------------- Server-Sent Events
  // Yields {event, data} per event of a text/event-stream body (any line ending).
  async function* sseEvents(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let event = "";
    let data = [];
    const dispatch = function* () {
      if (data.length) yield { event: event || "message", data: data.join("\n") };
      event = "";
      data = [];
    };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
        // A trailing \r may be half of \r\n: keep it until the next chunk (or the end).
        const lines = buffer.split(done ? /\r\n|\r|\n/ : /\r\n|\n|\r(?!$)/);
        buffer = done ? "" : lines.pop();
        for (const line of lines) {
          if (line === "") { yield* dispatch(); continue; }
          if (line.startsWith(":")) continue; // comment / keep-alive ping
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (field === "event") event = value;
          else if (field === "data") data.push(value);
        }
        if (done) { yield* dispatch(); return; }
      }
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  // ---------------------------------------------------------------- answer
  function citedFromText(text) {
    const cited = new Set();
    for (const m of text.matchAll(CITATION)) {
      for (const part of m[1].split(",")) {
        const n = Number(part.trim());
        if (state.sources.has(n)) cited.add(n);
      }
    }
    return cited;
  }

  function citationLink(n) {
    const source = state.sources.get(n);
    return h("a", {
      className: "cite", href: `#source-${n}`, "data-n": n,
      "aria-label": `[${n}]: source ${n}` + (source && source.title ? `, ${source.title}` : ""),
    }, `[${n}]`);
  }

  // The answer as text nodes, with every [n] that names a known source as a link to its card.
  function answerNodes(text) {
    const nodes = [];
    let last = 0;
    for (const m of text.matchAll(CITATION)) {
      const numbers = m[1].split(",").map((p) => Number(p.trim()));
      if (!numbers.every((n) => state.sources.has(n))) continue; // unknown source: plain text
      if (m.index > last) nodes.push(document.createTextNode(text.slice(last, m.index)));
      numbers.forEach((n, i) => {
        if (i > 0) nodes.push(document.createTextNode(" "));
        nodes.push(citationLink(n));
      });
      last = m.index + m[0].length;
    }
    if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
    return nodes;
  }

  function copyButton(text) {
    const button = h("button", { type: "button", className: "copy", "aria-label": `Copy ${text}`, title: "Copy" }, "Copy");
    button.addEventListener("click", async (e) => {
      e.preventDefault();
      e.stopPropagation();
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
      } catch {
        button.textContent = "Select and copy";
      }
    });
    return button;
  }

  // One literal of the answer: quoted (a link to its evidence line, a copy button on commands)
  // or unverified (marked: not in the sources).
  function literalNode(text, mark) {
    if (mark.verified) {
      const link = h("a", {
        className: "quote", href: `#source-${mark.n}`, "data-n": mark.n,
        "data-highlight": Number.isInteger(mark.highlight) ? mark.highlight : "",
        title: `Quoted from source [${mark.n}]`,
      }, text);
      const command = mark.kind === "command" || mark.kind === "code";
      return h("span", { className: "literal verified" }, link, command && copyButton(text));
    }
    return h("span", { className: "literal" },
      h("mark", { className: "unverified", title: "Not in the sources: check before running" }, text),
      h("span", { className: "warn" }, " (not in the sources — check before running)"));
  }

  // The answer with its checked literals marked (once done), citations linked in between.
  function markedNodes(text) {
    const marks = [...state.quotes.map((q) => ({ ...q, verified: true })),
      ...state.unverified.map((u) => ({ ...u, verified: false }))]
      .sort((a, b) => Number(a.answer_start) - Number(b.answer_start));
    const nodes = [];
    let last = 0;
    for (const mark of marks) {
      const start = Number(mark.answer_start), end = Number(mark.answer_end);
      if (!Number.isInteger(start) || !Number.isInteger(end) || start < last || end > text.length || end <= start) continue;
      // A code span's backticks: drop them, the literal is shown as code.
      const fence = mark.kind === "code" ? (text.slice(last, start).match(/`+$/) || [""])[0] : "";
      const closes = fence && text.startsWith(fence, end);
      const before = closes ? text.slice(last, start - fence.length) : text.slice(last, start);
      nodes.push(...answerNodes(before), literalNode(text.slice(start, end), mark));
      last = closes ? end + fence.length : end;
    }
    nodes.push(...answerNodes(text.slice(last)));
    return nodes;
  }

  function renderAnswer() {
    state.renderQueued = false;
    const nodes = state.streaming ? answerNodes(state.answer) : markedNodes(state.answer);
    if (state.notFound) nodes.unshift(h("p", { className: "not-found" }, "The sources do not answer this question."));
    const flagged = [...new Set(state.unverified.map((u) => u.literal))];
    if (!state.streaming && flagged.length) {
      nodes.push(h("p", { className: "unverified-list" }, "Not in the sources — check before running: ",
        ...flagged.flatMap((l, i) => [i ? ", " : "", h("code", {}, l)])));
    }
    if (state.streaming) nodes.push(h("span", { className: "caret", "aria-hidden": "true" }));
    else if (!state.answer && !state.failed) nodes.push(h("span", { className: "placeholder" }, "(The model gave no answer.)"));
    ui.answer.replaceChildren(...nodes);
    markCited();
  }

  function queueRender() {
    if (state.renderQueued) return;
    state.renderQueued = true;
    requestAnimationFrame(renderAnswer);
  }

  // ---------------------------------------------------------------- sources
  function formatDate(created) {
    if (typeof created !== "string" || !created) return null;
    const m = created.match(/^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}:\d{2}))?/);
    return m ? (m[2] ? `${m[1]} ${m[2]}` : m[1]) : created;
  }

  function documentHref(s) {
    const raw = typeof s.url === "string" && s.url ? s.url : "/v1/documents/" + encodeURIComponent(String(s.doc_id));
    try {
      const url = new URL(raw, window.location.href);
      if (url.protocol === "http:" || url.protocol === "https:") return url.href; // no javascript: / data:
    } catch { /* fall through */ }
    return null;
  }

  function sourceCard(s) {
    const n = Number(s.n);
    const titleId = `source-${n}-title`;
    const date = formatDate(s.created);
    const docType = s.doc_type ? DOC_TYPES[s.doc_type] || String(s.doc_type) : null;
    const key = s.key === null || s.key === undefined || s.key === "" ? null
      : (s.doc_type === "elog" ? `MID ${s.key}` : String(s.key));
    const meta = h("p", { className: "meta" },
      date && h("time", { datetime: s.created }, date),
      key && h("span", { className: "key" }, key),
      docType && h("span", {}, docType),
      s.source && h("span", { className: "path", title: String(s.source) }, String(s.source)));

    const highlights = Array.isArray(s.highlights)
      ? s.highlights.filter((line) => typeof line === "string" && line.trim()) : [];
    const body = highlights.length
      ? h("ul", { className: "highlights", "aria-label": "Matching lines" },
        ...highlights.map((l, i) => h("li", { id: `source-${n}-line-${i}` }, l)))
      : h("p", { className: "snippet" }, s.snippet || "");

    const href = documentHref(s);
    const score = Number(s.score);
    const foot = h("p", { className: "card-foot" },
      href && h("a", { href, target: "_blank", rel: "noopener noreferrer", className: "doc-link" }, "Open document"),
      Number.isFinite(score) && h("span", { className: "score", title: "retrieval score" }, `score ${score.toFixed(3)}`));

    return h("li", { id: `source-${n}`, className: "card", tabindex: "-1", "aria-labelledby": titleId, "data-n": n },
      h("div", { className: "card-head" },
        h("span", { className: "num", "aria-hidden": "true" }, `[${n}]`),
        h("h3", { id: titleId, className: "title" },
          h("span", { className: "visually-hidden" }, `Source ${n}: `), s.title || String(s.doc_id || "untitled")),
        h("span", { className: "badge", hidden: true }, "Cited")),
      meta, body, foot);
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

  function markCited() {
    const cited = state.serverCited || citedFromText(state.answer);
    for (const card of ui.sources.querySelectorAll(".card")) {
      const on = cited.has(Number(card.dataset.n));
      card.classList.toggle("cited", on);
      card.querySelector(".badge").hidden = !on;
    }
  }

  function focusSource(n) {
    const card = $(`source-${n}`);
    if (!card) return;
    const smooth = !window.matchMedia("(prefers-reduced-motion: reduce)").matches;
    card.scrollIntoView({ behavior: smooth ? "smooth" : "auto", block: "nearest" });
    for (const other of ui.sources.querySelectorAll(".card.flash")) other.classList.remove("flash");
    void card.offsetWidth; // restart the animation
    card.classList.add("flash");
    card.focus({ preventScroll: true });
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

  // ---------------------------------------------------------------- asking
  function optionalInt(input) {
    const raw = input.value.trim();
    if (!raw) return null;
    const n = Number(raw);
    return Number.isInteger(n) ? n : raw; // let the server explain a bad value
  }

  function setBusy(busy) {
    ui.ask.disabled = busy;
    ui.stop.hidden = !busy;
    ui.answer.setAttribute("aria-busy", busy ? "true" : "false");
  }

  function handleDone(payload) {
    state.streaming = false;
    if (Array.isArray(payload.sources)) renderSources(payload.sources);
    if (typeof payload.answer === "string") state.answer = payload.answer; // final text: marks and cuts applied
    if (Array.isArray(payload.cited)) state.serverCited = new Set(payload.cited.map(Number));
    state.quotes = Array.isArray(payload.quotes) ? payload.quotes.filter((q) => q && typeof q === "object") : [];
    state.unverified = Array.isArray(payload.unverified) ? payload.unverified.filter((u) => u && typeof u === "object") : [];
    state.notFound = payload.not_found === true;
    renderAnswer();
    ui.stats.textContent = statsText(payload.stats);
    setPhase("done");
  }

  async function ask() {
    if (state.controller) return;
    const question = ui.question.value.trim();
    if (!question) {
      showError("Type a question first.");
      ui.question.focus();
      return;
    }
    const body = { question, stream: true };
    const topK = optionalInt(ui.topK);
    if (topK !== null) body.top_k = topK;
    const maxNew = optionalInt(ui.maxNew);
    if (maxNew !== null) body.max_new_tokens = maxNew;

    const headers = { "Content-Type": "application/json", Accept: "text/event-stream" };
    const key = currentKey();
    if (key) headers.Authorization = `Bearer ${key}`;

    clearError();
    Object.assign(state, { answer: "", sources: new Map(), serverCited: null, quotes: [], unverified: [], notFound: false,
      streaming: true, failed: false });
    ui.sources.replaceChildren();
    ui.sourcesCount.textContent = "";
    ui.answer.dataset.deltas = "0";
    ui.stats.textContent = "Searching the logbooks…";
    renderAnswer();
    setPhase("streaming");
    const controller = new AbortController();
    state.controller = controller;
    setBusy(true);

    let finished = false;
    try {
      const resp = await fetch("/v1/ask", { method: "POST", headers, body: JSON.stringify(body), signal: controller.signal });
      if (!resp.ok) {
        await showHttpError(resp);
        finished = true;
        ui.stats.textContent = "";
        Object.assign(state, { streaming: false, failed: true });
        renderAnswer();
        setPhase("error");
        return;
      }
      if (!(resp.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
        handleDone(await resp.json()); // a server that answered whole: {answer, sources, stats}
        finished = true;
        return;
      }
      ui.stats.textContent = "Generating…";
      for await (const { event, data } of sseEvents(resp.body)) {
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
          finished = true;
        } else if (event === "error") {
          Object.assign(state, { streaming: false, failed: true });
          renderAnswer();
          showError("The answer could not be completed.", detailLines(payload.detail));
          ui.stats.textContent = "";
          setPhase("error");
          finished = true;
        }
      }
      if (!finished) {
        finished = true;
        Object.assign(state, { streaming: false, failed: true });
        renderAnswer();
        showError("The connection closed before the answer was complete.");
        ui.stats.textContent = "";
        setPhase("error");
      }
    } catch (err) {
      Object.assign(state, { streaming: false, failed: true });
      renderAnswer();
      if (err && err.name === "AbortError") {
        ui.stats.textContent = "Stopped.";
        setPhase("done");
      } else {
        showError("Could not reach the server.", [String(err && err.message ? err.message : err)]);
        ui.stats.textContent = "";
        setPhase("error");
      }
    } finally {
      state.controller = null;
      state.streaming = false;
      setBusy(false);
    }
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
    focusSource(Number(link.dataset.n));
    const line = link.dataset.highlight !== undefined && link.dataset.highlight !== ""
      ? $(`source-${link.dataset.n}-line-${link.dataset.highlight}`) : null;
    if (line) {
      line.classList.remove("flash");
      void line.offsetWidth;
      line.classList.add("flash");
    }
  });
  for (const type of ["mouseover", "mouseout", "focusin", "focusout"]) {
    ui.answer.addEventListener(type, (e) => {
      const link = e.target.closest("a.cite, a.quote");
      const card = link && $(`source-${link.dataset.n}`);
      if (card) card.classList.toggle("linked", type === "mouseover" || type === "focusin");
    });
  }

  const saved = storedKey();
  if (saved) {
    ui.key.value = saved;
    showKeyPanel(false);
  }
  setPhase("idle");
})();
