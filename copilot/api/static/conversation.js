// The conversation so far: the finished exchanges before the current one, shown as a thread
// above the answer and sent with the next question as chat turns (POST /v1/ask "history").

import { answerNodes } from "./answer.js";
import { h } from "./dom.js";

const MAX_MESSAGES = 50; // what POST /v1/ask takes: the newest 25 exchanges
const MAX_CONTENT = 20_000; // characters per message, as POST /v1/ask takes

function turnItem(exchange, number) {
  const cited = exchange.sources.filter((s) => exchange.cited.has(Number(s.n)));
  return h("li", { className: "turn", "data-turn": number },
    h("p", { className: "turn-question" }, h("span", { className: "who" }, "You"), exchange.question),
    h("div", { className: "turn-answer" }, h("span", { className: "who" }, "OpsCopilot"),
      ...answerNodes(exchange.answer, new Map())),
    cited.length > 0 && h("p", { className: "turn-sources" }, "Cited: ",
      cited.map((s) => `[${s.n}] ${s.title || s.doc_id}`).join("; ")));
}

export class Conversation {
  // section: shown while the conversation has exchanges; list: the <ol> of turns.
  constructor(section, list) {
    this.section = section;
    this.list = list;
    this.exchanges = [];
  }

  get size() {
    return this.exchanges.length;
  }

  // Keep a finished exchange: {question, answer, sources: [source], cited: Set of n}.
  add(exchange) {
    this.exchanges.push(exchange);
    this.list.append(turnItem(exchange, this.exchanges.length));
    this.section.hidden = false;
  }

  clear() {
    this.exchanges = [];
    this.list.replaceChildren();
    this.section.hidden = true;
  }

  // The history to send with the next question: [{role, content}], oldest first.
  messages() {
    return this.exchanges.flatMap((e) => [
      { role: "user", content: e.question.slice(0, MAX_CONTENT) },
      { role: "assistant", content: e.answer.slice(0, MAX_CONTENT) },
    ]).slice(-MAX_MESSAGES);
  }
}
