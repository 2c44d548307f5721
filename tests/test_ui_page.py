"""The question page at ``GET /``: served assets, and a real headless Chromium driving it
(harness: :mod:`ui_browser`).

One test asks the sample question end to end over the sample corpus and the embedded models
and saves a screenshot to ``evals/results/ui.png``; the others route ``POST /v1/ask`` to
canned responses to check escaping, citations, the error and API-key paths, and (issue 22)
copy buttons, follow-up questions sent with the conversation, filters, the document view
(the real ``GET /v1/documents/{id}``) and 👍/👎 stored by the real ``POST /v1/feedback``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

pytest.register_assert_rewrite("ui_browser")  # it is also this module's plugin (below)
from ui_browser import canned_sse, expect, wait_finished  # noqa: E402

from copilot.api.app import create_app
from copilot.api.schemas.ask import AskRequest
from copilot.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
STATIC = REPO_ROOT / "copilot" / "api" / "static"
#: The README's screenshots are rewritten only when asked (COPILOT_UPDATE_SCREENSHOTS=1), so a
#: test run leaves the tracked files alone; otherwise they go to a temporary folder.
SCREENSHOT = (REPO_ROOT / "evals" / "results" if os.environ.get("COPILOT_UPDATE_SCREENSHOTS") == "1"
              else Path(tempfile.mkdtemp(prefix="opscopilot-ui-"))) / "ui.png"
pytest_plugins = ["ui_browser"]  # the fixtures live_url, browser and page
QUESTION = "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?"
EVIL = "<img src=x onerror=alert(1)>"


# ---------------------------------------------------------------------------------- plain HTTP
@pytest.fixture(scope="module")
def plain_client(tmp_path_factory):
    """The app without its lifespan (no models): enough for the page and its assets."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("ui-data"), _env_file=None)
    return TestClient(create_app(settings))


def test_page_and_assets_are_served(plain_client):
    r = plain_client.get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    html = r.text
    assert '<label for="question"' in html and 'aria-live="polite"' in html
    # Everything the page loads comes from this app (no CDN).
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert set(refs) == {"/static/app.css", "/static/conversation.css", "/static/app.js"}, refs
    modules = [f"/static/{p.name}" for p in STATIC.glob("*.js")]
    assert "/static/app.js" in modules and len(modules) > 1
    styles = [("/static/app.css", "text/css"), ("/static/conversation.css", "text/css")]
    for path, mime in [*((m, "javascript") for m in modules), *styles]:
        asset = plain_client.get(path)
        assert asset.status_code == 200, path
        assert mime in asset.headers["content-type"], (path, asset.headers["content-type"])
    assert plain_client.get("/static/missing.js").status_code == 404
    assert plain_client.get("/static/../app.py").status_code == 404
    assert plain_client.get("/static/%2e%2e/app.py").status_code == 404


def test_script_builds_the_dom_from_text_only(plain_client):
    """Data reaches the page through textContent / createElement: no HTML sinks in any script,
    and every module the page imports is one of them (served from this app)."""
    imported = set()
    for path in STATIC.glob("*.js"):
        script = plain_client.get(f"/static/{path.name}").text
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                     "DOMParser", "createContextualFragment"):
            assert sink not in script, (path.name, sink)
        imported |= set(re.findall(r'^import .* from "\./([\w.]+)";$', script, re.MULTILINE))
    assert imported == {p.name for p in STATIC.glob("*.js")} - {"app.js"}, imported


def test_the_page_is_not_in_the_api_schema(plain_client):
    assert "/" not in plain_client.get("/openapi.json").json()["paths"]


# ---------------------------------------------------------------------------------- the browser
@pytest.mark.slow
def test_ask_the_sample_question_in_the_browser(live_url, page):
    page.goto(f"{live_url}/")
    page.get_by_label("Question").fill(QUESTION)
    page.get_by_label("Passages").fill("3")
    page.get_by_label("Max tokens").fill("64")
    page.get_by_label("Question").press("Enter")
    state = wait_finished(page, timeout_ms=60_000)
    assert state == "done", page.inner_text("#error")
    assert page.is_hidden("#error")

    assert page.inner_text("#answer").strip()
    assert int(page.get_attribute("#answer", "data-deltas")) > 1  # it came as a stream of deltas
    assert page.get_attribute("#answer", "aria-busy") == "false"
    titles = page.locator("#sources .card .title").all_inner_texts()
    assert len(titles) == 3 and all(t.strip() for t in titles), titles
    assert any("FNAL" in text or "SRM" in text for text in page.locator("#sources .card").all_inner_texts())
    stats = page.inner_text("#stats")
    assert re.search(r"\d+ tokens? · ", stats), stats
    link = page.locator("#sources .card a.doc-link").first.get_attribute("href")
    assert link.startswith(f"{live_url}/v1/documents/"), link
    assert page.request.get(link).ok  # the card's document link resolves
    assert page.problems == []

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.get_by_label("Question").blur()
    page.screenshot(path=str(SCREENSHOT))

    # the real server takes the page's follow-up (history) and document fetch
    page.locator("#sources .card a.doc-link").first.click()
    expect(page.locator("#doc-view")).to_have_attribute("data-state", "ready")
    assert page.locator("#doc-view .doc-text").inner_text().strip()
    page.keyboard.press("Escape")
    page.get_by_label("Question").fill("Which ticket tracked it?")
    page.get_by_label("Question").press("Enter")
    assert wait_finished(page, timeout_ms=60_000) == "done", page.inner_text("#error")
    assert page.locator("#turns .turn").count() == 1 and page.inner_text("#answer").strip()
    assert QUESTION in page.locator("#turns .turn-question").inner_text()
    kept = page.locator("#turns .turn-answer").text_content()
    assert kept.startswith("OpsCopilot") and kept[len("OpsCopilot"):].strip()  # the first answer is kept
    assert page.problems == []


EVIL_SOURCES = [
    {"n": 1, "doc_id": "tickets/evil.csv#X-1", "source": "tickets/evil.csv", "title": EVIL, "key": "X-1",
     "doc_type": "csv_ticket", "created": "2026-01-20T06:04:00+00:00", "score": 0.03, "snippet": EVIL,
     "url": "javascript:alert(1)", "cited": True, "highlights": [f"line with {EVIL}"]},
    {"n": 2, "doc_id": "logbooks/ops.elog#7", "source": "logbooks/ops.elog", "title": "Pool restarted",
     "key": "7", "doc_type": "elog", "created": None, "score": 0.02, "snippet": "dc-pool-07 restarted"},
]


@pytest.mark.slow
def test_data_is_rendered_as_text_and_citations_link_to_cards(live_url, page):
    body = canned_sse(
        ("sources", {"sources": EVIL_SOURCES}),
        ("delta", {"text": f"Fixed by {EVIL} [1]; see [2] and [3]"}),
        ("delta", {"text": " and [2?]."}),
        ("done", {"sources": EVIL_SOURCES, "answer": f"Fixed by {EVIL} [1]; see [2?] and [3].", "cited": [1],
                  "stats": {"new_tokens": 12, "total_ms": 840, "finish_reason": "repetition", "tau": 2.5}}))
    page.route("**/v1/ask", lambda route: route.fulfill(status=200, body=body,
                                                        headers={"content-type": "text/event-stream"}))
    page.goto(f"{live_url}/")
    page.get_by_label("Question").fill("anything")
    page.get_by_role("button", name="Ask").click()
    assert wait_finished(page) == "done"

    assert page.locator("img").count() == 0
    assert page.inner_text("#source-1-title").endswith(EVIL)
    assert EVIL in page.inner_text("#answer")
    assert EVIL in page.inner_text("#source-1 .highlights")
    # The final answer replaced the streamed one; only [1] names a source that exists and is valid.
    assert page.inner_text("#answer") == f"Fixed by {EVIL} [1]; see [2?] and [3]."
    assert page.locator("#answer a.cite").all_inner_texts() == ["[1]"]
    # Cited cards are marked; a javascript: URL is not linked; without url the API's document route is.
    assert page.get_attribute("#source-1", "class").split() == ["card", "cited"]
    assert page.is_visible("#source-1 .badge") and page.is_hidden("#source-2 .badge")
    assert page.locator("#source-1 a.doc-link").count() == 0
    assert page.get_attribute("#source-2 a.doc-link", "href") == f"{live_url}/v1/documents/logbooks%2Fops.elog%237"
    assert page.inner_text("#source-2 .snippet") == "dc-pool-07 restarted"  # no highlights: the snippet
    assert "stopped: the model started repeating itself" in page.inner_text("#stats")

    page.locator("#answer a.cite").first.click()
    expect(page.locator("#source-1")).to_be_focused()
    assert "flash" in page.get_attribute("#source-1", "class")
    time.sleep(0.2)  # let a stray onerror fire, if any
    assert page.problems == []


POOL_SOURCES = [{**EVIL_SOURCES[1], "highlights": ["restart: systemctl restart dcache@dc-pool-07Domain.service"]}]
QUOTED_ANSWER = "Run `systemctl restart dcache@dc-pool-07Domain.service` [1], then `dcache pool wipe -f` on dc-pool-99."
QUOTED_DONE = {
    "sources": EVIL_SOURCES[1:], "answer": QUOTED_ANSWER, "cited": [1], "not_found": False,
    "quotes": [{"literal": "systemctl restart dcache@dc-pool-07Domain.service", "kind": "code", "answer_start": 5,
                "answer_end": 54, "n": 2, "doc_id": "logbooks/ops.elog#7", "chunk_id": "logbooks/ops.elog#7#0",
                "start": 10, "end": 59, "highlight": 0}],
    "unverified": [{"literal": "dcache pool wipe -f", "kind": "code", "answer_start": 67, "answer_end": 86,
                    "in_question": False},
                   {"literal": "dc-pool-99", "kind": "name", "answer_start": 91, "answer_end": 101,
                    "in_question": False}],
    "stats": {"new_tokens": 30, "total_ms": 900, "finish_reason": "eos"}}


@pytest.mark.slow
def test_quoted_literals_link_to_their_evidence_line_and_unverified_ones_are_marked(live_url, page):
    assert QUOTED_ANSWER[5:54] == QUOTED_DONE["quotes"][0]["literal"]
    assert QUOTED_ANSWER[67:86] == "dcache pool wipe -f" and QUOTED_ANSWER[91:101] == "dc-pool-99"
    sources = POOL_SOURCES
    done = {**QUOTED_DONE, "sources": sources}
    body = canned_sse(("sources", {"sources": sources}), ("delta", {"text": QUOTED_ANSWER}), ("done", done))
    page.route("**/v1/ask", lambda route: route.fulfill(status=200, body=body,
                                                        headers={"content-type": "text/event-stream"}))
    page.goto(f"{live_url}/")
    page.get_by_label("Question").fill("how was the pool restarted?")
    page.get_by_role("button", name="Ask").click()
    assert wait_finished(page) == "done"
    assert page.locator("#answer a.quote").all_inner_texts() == ["systemctl restart dcache@dc-pool-07Domain.service"]
    # every code span has a copy button: the command quoted from a source and the one in none
    assert page.locator("#answer .code-span button.copy").count() == 2
    assert page.locator("#answer mark.unverified").all_inner_texts() == ["dcache pool wipe -f", "dc-pool-99"]
    assert page.locator("#answer .warn").count() == 2
    assert "check before running" in page.inner_text("#answer .unverified-list")
    page.locator("#answer a.quote").click()
    expect(page.locator("#source-2")).to_be_focused()
    assert "flash" in page.get_attribute("#source-2-line-0", "class")
    page.screenshot(path=str(SCREENSHOT.with_name("ui-quotes.png")))
    assert page.problems == []


@pytest.mark.slow
def test_a_not_found_answer_says_so_above_the_closest_entries(live_url, page):
    page.goto(f"{live_url}/")
    page.get_by_label("Question").fill("What was the resolution of OPS-999?")
    page.get_by_label("Question").press("Enter")
    assert wait_finished(page, timeout_ms=60_000) == "done"
    assert page.is_visible("#answer .not-found")
    assert page.inner_text("#answer").count("Not found") == 1 and "OPS-999" in page.inner_text("#answer")
    assert page.locator("#sources .card").count() >= 1
    assert page.problems == []


@pytest.mark.slow
def test_errors_and_the_api_key(live_url, page):
    seen: list[dict] = []
    replies = [
        (401, {"detail": "missing API key: send 'Authorization: Bearer <key>'"}),
        (400, {"detail": [{"loc": ["body", "max_sources"], "msg": "Input should be greater than or equal to 1",
                           "type": "greater_than_equal"}]}),
        (200, canned_sse(("delta", {"text": "partial"}), ("error", {"detail": "generation failed: boom"}))),
    ]

    def handle(route):
        seen.append({"headers": route.request.headers, "body": route.request.post_data_json})
        status, reply = replies[len(seen) - 1]
        if status == 200:
            route.fulfill(status=200, body=reply, headers={"content-type": "text/event-stream"})
        else:
            route.fulfill(status=status, body=json.dumps(reply), headers={"content-type": "application/json"})

    page.route("**/v1/ask", handle)
    page.goto(f"{live_url}/")
    assert page.is_hidden("#key-panel")
    page.get_by_label("Question").fill("q")
    page.get_by_label("Question").press("Enter")
    assert wait_finished(page) == "error"
    assert "needs an API key" in page.inner_text("#error") and "missing API key" in page.inner_text("#error")
    assert page.is_visible("#key-panel") and "authorization" not in seen[0]["headers"]

    page.get_by_label("API key").fill("s3cret")
    page.get_by_label("Passages").fill("0")
    page.get_by_role("button", name="Ask").click()
    assert wait_finished(page) == "error"
    assert seen[1]["headers"]["authorization"] == "Bearer s3cret"
    assert seen[1]["body"] == {"question": "q", "stream": True, "max_sources": 0}
    assert "max_sources: Input should be greater than or equal to 1" in page.inner_text("#error")

    page.reload()  # the key is kept in localStorage
    assert page.get_by_label("API key").input_value() == "s3cret"
    page.get_by_label("Question").fill("q")
    page.get_by_label("Question").press("Enter")
    assert wait_finished(page) == "error"
    assert seen[2]["headers"]["authorization"] == "Bearer s3cret"
    assert "generation failed: boom" in page.inner_text("#error")
    assert page.inner_text("#answer") == "partial"  # what came before the error stays
    assert page.problems == []


# ---------------------------------------------------------------------------------- issue 22: the page
def route_ask(page, *dones: dict) -> list[dict]:
    """Answer the page's ``POST /v1/ask`` with canned streams (sources, one delta, then each
    ``done`` in turn); the list collects the JSON bodies the page sent."""
    seen: list[dict] = []

    def handle(route):
        seen.append(route.request.post_data_json)
        done = dones[min(len(seen), len(dones)) - 1]
        body = canned_sse(("sources", {"sources": done["sources"]}), ("delta", {"text": done["answer"]}),
                          ("done", done))
        route.fulfill(status=200, body=body, headers={"content-type": "text/event-stream"})

    page.route("**/v1/ask", handle)
    return seen


def ask_on_page(page, question: str) -> None:
    page.get_by_label("Question").fill(question)
    page.locator("#ask-button").click()
    assert wait_finished(page) == "done", page.inner_text("#error")


BLOCK_ANSWER = "Then check it:\n```bash\ndcache pool ls dc-pool-07\n```\nIt should say enabled [2]."


@pytest.mark.slow
def test_copy_buttons_copy_commands_code_blocks_and_evidence_lines(live_url, page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_url)
    done = {**QUOTED_DONE, "sources": POOL_SOURCES, "answer": QUOTED_ANSWER + "\n" + BLOCK_ANSWER}
    route_ask(page, done)
    page.goto(f"{live_url}/")
    ask_on_page(page, "how was the pool restarted?")

    def copied(button) -> str:
        button.click()
        expect(button).to_have_attribute("data-state", "copied")
        return page.evaluate("navigator.clipboard.readText()")

    spans = page.locator("#answer .code-span")
    assert spans.locator("code").all_inner_texts() == ["systemctl restart dcache@dc-pool-07Domain.service",
                                                        "dcache pool wipe -f"]  # shown without the backticks
    assert copied(spans.nth(0).locator("button.copy")) == "systemctl restart dcache@dc-pool-07Domain.service"
    block = page.locator("#answer .code-block")
    assert block.locator("pre").inner_text() == "dcache pool ls dc-pool-07"
    assert copied(block.locator("button.copy")) == "dcache pool ls dc-pool-07"
    assert page.locator("#answer .code-block a.cite").count() == 0
    line = page.locator("#source-2-line-0")
    assert copied(line.get_by_role("button", name="Copy evidence line 1 of source 2")) == \
        "restart: systemctl restart dcache@dc-pool-07Domain.service"
    assert page.problems == []


@pytest.mark.slow
def test_a_follow_up_is_sent_with_the_conversation_and_new_conversation_clears_it(live_url, page):
    first = {**QUOTED_DONE, "sources": POOL_SOURCES, "cited": [2]}
    second = {"sources": POOL_SOURCES, "answer": "On dc-pool-07 [2].", "cited": [2], "quotes": [], "unverified": [],
              "stats": {"new_tokens": 5, "total_ms": 300, "finish_reason": "eos"}}
    seen = route_ask(page, first, second)
    page.goto(f"{live_url}/")
    assert page.is_hidden("#conversation")
    ask_on_page(page, "how was the pool restarted?")
    assert page.get_by_label("Question").input_value() == ""  # ready for the follow-up
    ask_on_page(page, "and on which host?")

    history = [{"role": "user", "content": "how was the pool restarted?"},
               {"role": "assistant", "content": QUOTED_ANSWER}]
    assert "history" not in seen[0]
    assert seen[1] == {"question": "and on which host?", "stream": True, "history": history}
    AskRequest.model_validate(seen[1])  # the body is one the API takes
    # the earlier exchange is shown above the current one, which is in the answer panel
    assert page.is_visible("#conversation")
    turns = page.locator("#turns .turn")
    assert turns.count() == 1
    assert "how was the pool restarted?" in turns.first.locator(".turn-question").inner_text()
    assert "systemctl restart dcache@dc-pool-07Domain.service" in turns.first.locator(".turn-answer").inner_text()
    assert "[2] Pool restarted" in turns.first.locator(".turn-sources").inner_text()
    assert "and on which host?" in page.inner_text("#asked") and page.inner_text("#answer") == "On dc-pool-07 [2]."

    ask_on_page(page, "a third question")
    assert [m["content"] for m in seen[2]["history"]] == [
        "how was the pool restarted?", QUOTED_ANSWER, "and on which host?", "On dc-pool-07 [2]."]
    page.screenshot(path=str(SCREENSHOT.with_name("ui-conversation.png")), full_page=True)

    page.get_by_role("button", name="New conversation").click()
    assert page.is_hidden("#conversation") and page.locator("#turns .turn").count() == 0
    assert page.is_hidden("#asked") and page.locator("#sources .card").count() == 0
    ask_on_page(page, "a fresh question")
    assert "history" not in seen[3]
    assert page.problems == []


@pytest.mark.slow
def test_filters_are_sent_with_the_question(live_url, page):
    seen = route_ask(page, {**QUOTED_DONE, "sources": POOL_SOURCES})
    page.goto(f"{live_url}/")
    page.get_by_label("Type").select_option("jira")
    page.locator("#since").fill("2026-01-20")
    page.locator("#until").fill("2026-01-27")
    page.get_by_label("Passages").fill("4")
    ask_on_page(page, "what broke the FTS?")
    filters = {"doc_types": ["jira"], "since": "2026-01-20", "until": "2026-01-27"}
    assert seen[0] == {"question": "what broke the FTS?", "stream": True, "max_sources": 4, "filters": filters}
    parsed = AskRequest.model_validate(seen[0]).filters  # the API reads the page's dates as whole days
    assert parsed.since.isoformat() == "2026-01-20T00:00:00+00:00"
    assert parsed.until.isoformat().startswith("2026-01-27T23:59:59")

    page.get_by_label("Type").select_option("")  # "any" again: no filter sent
    page.locator("#since").fill("")
    page.locator("#until").fill("")
    ask_on_page(page, "what broke the FTS?")
    assert "filters" not in seen[1]
    assert page.problems == []


POSTMORTEM = "postmortems/2026-01-fts-outage.md#2026-01-fts-outage"


@pytest.mark.slow
def test_open_document_shows_the_document_as_readable_text(live_url, page, sample_service):
    """The real ``GET /v1/documents/{id}`` of an 8-chunk post-mortem, fetched by the page."""
    source = {"n": 1, "doc_id": POSTMORTEM, "source": "postmortems/2026-01-fts-outage.md", "doc_type": "postmortem",
              "title": "FTS3 transfer scheduling outage", "url": "/v1/documents/" + POSTMORTEM.replace("#", "%23"),
              "highlights": ["- **13:02** - `DbThreadsNum=30` deployed, `systemctl restart fts-server` on both nodes."],
              "score": 0.1, "created": "2026-01-27T08:40:00+00:00"}
    route_ask(page, {"sources": [source], "answer": "DbThreadsNum was reverted [1].", "cited": [1],
                     "stats": {"finish_reason": "eos"}})
    requests: list[dict] = []
    page.on("request", lambda r: requests.append(r.headers) if "/v1/documents/" in r.url else None)
    page.goto(f"{live_url}/")
    page.evaluate("localStorage.setItem('opscopilot.apiKey', 'k-doc')")
    page.reload()
    ask_on_page(page, "what was reverted?")
    page.locator("#source-1 a.doc-link").click()
    dialog = page.locator("#doc-view")
    expect(dialog).to_have_attribute("data-state", "ready")
    assert requests and requests[-1]["authorization"] == "Bearer k-doc"  # fetched with the page's key
    assert page.url == f"{live_url}/"  # no navigation to the raw JSON

    text = dialog.locator(".doc-text").inner_text()
    chunks = sample_service.store.lexical.document_chunks(POSTMORTEM)
    assert len(chunks) == 8
    header = chunks[0].text.split("\n", 1)[0]
    assert header not in text  # the header every chunk repeats is not shown
    for chunk in chunks:  # every chunk's text is there ...
        assert chunk.text.split("\n", 1)[1].strip() in text
    for line in ("# Post-mortem: FTS3 outage on 2026-01-27", "## Root cause", "## Timeline"):
        assert text.count(line) == 1, line  # ... and what consecutive chunks share, once
    assert not text.lstrip().startswith("{") and '"chunks"' not in text
    title = "FTS3 transfer scheduling outage - database connections exhausted"
    assert dialog.locator(".doc-title").inner_text() == title
    meta = dialog.locator(".doc-meta").inner_text()
    assert "Post-mortem" in meta and "postmortems/2026-01-fts-outage.md" in meta and "2026-01-27" in meta
    assert dialog.locator("mark.evidence").all_inner_texts() == [source["highlights"][0]]
    page.screenshot(path=str(SCREENSHOT.with_name("ui-document.png")))
    page.keyboard.press("Escape")
    expect(dialog).not_to_be_visible()
    assert page.problems == []


@pytest.mark.slow
def test_the_document_view_escapes_html_and_reports_errors(live_url, page):
    doc = {"doc_id": "tickets/evil.csv#X-1", "source": "tickets/evil.csv", "doc_type": "csv_ticket", "title": EVIL,
           "key": "X-1", "created": "2026-01-20T06:04:00Z", "n_chunks": 1,
           "chunks": [{"chunk_id": "tickets/evil.csv#X-1#0", "text": f"Ticket X-1 | {EVIL}\nbody {EVIL} <b>bold</b>"}]}
    replies = iter([(200, doc), (404, {"detail": "no document with id 'tickets/evil.csv#X-1'"})])

    def handle(route):
        status, body = next(replies)
        route.fulfill(status=status, body=json.dumps(body), headers={"content-type": "application/json"})

    page.route("**/v1/documents/**", handle)
    route_ask(page, {"sources": [{**EVIL_SOURCES[0], "url": "/v1/documents/tickets%2Fevil.csv%23X-1"}],
                     "answer": "See [1].", "cited": [1], "stats": {}})
    page.goto(f"{live_url}/")
    ask_on_page(page, "anything")
    page.locator("#source-1 a.doc-link").click()
    dialog = page.locator("#doc-view")
    expect(dialog).to_have_attribute("data-state", "ready")
    assert dialog.locator(".doc-title").inner_text() == EVIL
    assert dialog.locator(".doc-text").inner_text() == f"body {EVIL} <b>bold</b>"
    assert page.locator("img").count() == 0 and dialog.locator("b").count() == 0
    dialog.locator(".doc-close").click()
    page.locator("#source-1 a.doc-link").click()
    expect(dialog).to_have_attribute("data-state", "error")
    assert "no longer in the store" in dialog.locator(".doc-status").inner_text()
    time.sleep(0.2)
    assert page.problems == []


@pytest.mark.slow
def test_thumbs_up_with_a_reason_is_stored_by_the_feedback_route(live_url, page):
    done = {**QUOTED_DONE, "sources": POOL_SOURCES, "cited": [2]}
    route_ask(page, done)
    page.goto(f"{live_url}/")
    page.get_by_label("Max tokens").fill("64")
    page.get_by_label("Type").select_option("elog")
    ask_on_page(page, "how was the pool restarted?")
    feedback = page.locator("#feedback .feedback")
    assert feedback.get_attribute("data-state") == "idle"
    page.get_by_role("button", name="Good answer").click()
    expect(page.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "true")
    page.get_by_label("Why? (optional)").fill("the exact restart command")
    page.get_by_role("button", name="Send feedback").click()
    expect(feedback).to_have_attribute("data-state", "saved")
    assert "saved" in feedback.locator(".feedback-status").inner_text()

    stored = page.request.get(f"{live_url}/v1/feedback?limit=1").json()["feedback"][0]
    assert stored["rating"] == "up" and stored["reason"] == "the exact restart command"
    assert stored["question"] == "how was the pool restarted?" and stored["answer"] == QUOTED_ANSWER
    assert stored["sources"] == [{"n": 2, "doc_id": "logbooks/ops.elog#7", "title": "Pool restarted", "cited": True}]
    assert [q["literal"] for q in stored["quotes"]] == ["systemctl restart dcache@dc-pool-07Domain.service"]
    assert stored["settings"] == {"max_new_tokens": 64, "filters": {"doc_types": ["elog"]}}
    assert stored["history"] == [] and stored["not_found"] is False
    export = page.request.get(f"{live_url}/v1/feedback/export").text()
    assert any(json.loads(line)["id"] == stored["id"] for line in export.splitlines())
    page.screenshot(path=str(SCREENSHOT.with_name("ui-feedback.png")))
    assert page.problems == []


@pytest.mark.slow
def test_the_alerts_panel_lists_kept_answers_as_text_and_opens_their_sources(live_url, page):
    """``GET /v1/alerts`` (canned) rendered when the panel opens: each alert, its answer, its
    sources as links that open the real document view; untrusted text stays text."""
    alerts = {"total": 2, "offset": 0, "limit": 20, "alerts": [
        {"fingerprint": "0a1b", "alertname": "DCachePoolReadOnly", "status": "firing", "state": "answered",
         "starts_at": "2026-03-02T03:12:00Z", "received": "2026-03-02T03:12:01Z",
         "labels": {"instance": "dc-pool-07:9100"}, "annotations": {}, "question": "dc-pool-07 went read-only.",
         "answer": {"answer": f"Restarted with `systemctl restart dcache` [1]. {EVIL}", "not_found": False,
                    "sources": [{"n": 1, "doc_id": POSTMORTEM, "title": EVIL,
                                 "url": "/v1/documents/" + POSTMORTEM.replace("#", "%23")}]}},
        {"fingerprint": "0c0d", "alertname": "CertificateExpiringSoon", "status": "resolved", "state": "failed",
         "starts_at": "2026-03-03T00:00:00Z", "received": "2026-03-03T00:00:01Z", "labels": {"host": "xrootd-gw01"},
         "annotations": {}, "question": "certificate expiring on xrootd-gw01.", "error": "generation queue is full"}]}
    page.route("**/v1/alerts?*", lambda route: route.fulfill(status=200, body=json.dumps(alerts),
                                                              headers={"content-type": "application/json"}))
    page.goto(f"{live_url}/")
    page.locator("#alerts-panel summary").click()
    items = page.locator("#alerts li.alert")
    expect(items).to_have_count(2)
    first = items.nth(0).inner_text()
    assert "DCachePoolReadOnly on dc-pool-07:9100" in first and EVIL in first and "answered" in first
    assert page.locator("#alerts img").count() == 0  # the EVIL markup stayed text
    assert "generation queue is full" in items.nth(1).inner_text()
    assert "2 alert(s)" in page.locator("#alerts-status").inner_text()
    items.nth(0).locator("a.doc-link").click()
    dialog = page.locator("#doc-view")
    expect(dialog).to_have_attribute("data-state", "ready")
    assert "FTS3" in dialog.locator(".doc-title").inner_text()
    assert page.problems == []
