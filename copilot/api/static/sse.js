// Server-Sent Events from a fetch() response body (text/event-stream, any line ending).

// Yields {event, data} per event of a text/event-stream body.
export async function* sseEvents(body) {
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
