// 👍/👎 under a finished answer: pick one, optionally say why, send. The rating goes to
// POST /v1/feedback with what was asked and answered (built by the caller).

import { h } from "./dom.js";

const RATINGS = [["up", "👍", "Yes", "Good answer"], ["down", "👎", "No", "Bad answer"]];

async function failure(resp) {
  let message = "";
  try {
    const body = await resp.json();
    message = (body && body.error && body.error.message) || (typeof body.detail === "string" ? body.detail : "");
  } catch { /* not JSON */ }
  if (resp.status === 401 || resp.status === 403) return "Not saved: this server needs a valid API key.";
  return `Not saved (${resp.status})` + (message ? `: ${message}` : ".");
}

// The controls. payload(rating, reason) -> the POST /v1/feedback body; send(body) -> fetch
// Response. The element's data-state says where it is: idle | rated | sending | saved | failed.
export function feedbackControls({ payload, send }) {
  let rating = null;
  const reasonId = "feedback-reason";
  const buttons = RATINGS.map(([value, icon, text, label]) => {
    const button = h("button", { type: "button", className: "rate", "data-rating": value, "aria-label": label,
      "aria-pressed": "false", title: label }, h("span", { className: "icon", "aria-hidden": "true" }, icon), ` ${text}`);
    button.addEventListener("click", () => choose(value));
    return button;
  });
  const reason = h("input", { id: reasonId, type: "text", maxlength: "2000", autocomplete: "off",
    placeholder: "What was right or wrong?" });
  const submit = h("button", { type: "submit", className: "send-feedback" }, "Send feedback");
  const form = h("form", { className: "feedback-form", hidden: true },
    h("label", { for: reasonId }, "Why? (optional)"), reason, submit);
  const status = h("p", { className: "feedback-status", role: "status" });
  const root = h("div", { className: "feedback", role: "group", "aria-label": "Rate this answer", "data-state": "idle" },
    h("span", { className: "feedback-question" }, "Was this answer right?"), ...buttons, form, status);

  function choose(value) {
    rating = value;
    for (const b of buttons) b.setAttribute("aria-pressed", String(b.dataset.rating === value));
    form.hidden = false;
    root.dataset.state = "rated";
    status.textContent = "";
    reason.focus();
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!rating || root.dataset.state === "sending") return;
    root.dataset.state = "sending";
    submit.disabled = true;
    try {
      const resp = await send(payload(rating, reason.value.trim() || null));
      if (!resp.ok) throw new Error(await failure(resp));
      root.dataset.state = "saved";
      status.textContent = "Thanks: your rating is saved.";
      form.hidden = true;
      for (const b of buttons) b.disabled = true;
    } catch (err) {
      root.dataset.state = "failed";
      status.textContent = err instanceof TypeError ? "Not saved: could not reach the server." : err.message;
      submit.disabled = false;
    }
  });
  return root;
}
