"""The question page at ``GET /``: served assets, and a real headless Chromium driving it.

The browser tests launch Debian's ``/usr/bin/chromium`` through Playwright (its own browser
download is not used) against the app served by a real uvicorn on 127.0.0.1. One asks the
sample question end to end over the sample corpus and the embedded models and saves a
screenshot to ``evals/results/ui.png``; the others route ``POST /v1/ask`` to canned
responses to check escaping, citations and the error and API-key paths.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from copilot.api.app import create_app
from copilot.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = REPO_ROOT / "evals" / "results" / "ui.png"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
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
    assert set(refs) == {"/static/app.css", "/static/app.js"}, refs
    for path, mime in (("/static/app.js", "javascript"), ("/static/app.css", "text/css")):
        asset = plain_client.get(path)
        assert asset.status_code == 200, path
        assert mime in asset.headers["content-type"], (path, asset.headers["content-type"])
    assert plain_client.get("/static/missing.js").status_code == 404
    assert plain_client.get("/static/../app.py").status_code == 404
    assert plain_client.get("/static/%2e%2e/app.py").status_code == 404


def test_script_builds_the_dom_from_text_only(plain_client):
    """Data reaches the page through textContent / createElement: no HTML sinks in the script."""
    script = plain_client.get("/static/app.js").text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink


def test_the_page_is_not_in_the_api_schema(plain_client):
    assert "/" not in plain_client.get("/openapi.json").json()["paths"]


# ---------------------------------------------------------------------------------- the browser
@pytest.fixture(scope="module")
def live_url(sample_service):
    """The real app over the sample corpus, served by uvicorn on a free 127.0.0.1 port."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(sample_service.settings, sample_service), host="127.0.0.1", port=port,
                            log_level="warning", lifespan="on", timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="ui-uvicorn")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            pytest.fail("uvicorn did not start within 30 s")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)
    sock.close()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is missing (pip install playwright)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=30_000)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page at 1280 px, light theme; fails the test on any script error, CSP
    violation or dialog (``page.problems``)."""
    context = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme="light",
                                  reduced_motion="reduce")
    context.set_default_timeout(15_000)
    pg = context.new_page()
    problems: list[str] = []
    pg.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))

    def on_console(msg):  # an HTTP error status is logged as "Failed to load resource": expected here
        if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
            problems.append(f"console {msg.type}: {msg.text}")

    pg.on("console", on_console)

    def on_dialog(dialog):
        problems.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    pg.on("dialog", on_dialog)
    pg.problems = problems
    yield pg
    context.close()


def expect(locator):
    from playwright.sync_api import expect as _expect

    return _expect(locator)


def wait_finished(page, timeout_ms: int = 15_000) -> str:
    """Wait (bounded) until the page says the answer is done or failed; returns which.
    (Locators only: the page's CSP forbids the eval that ``wait_for_function`` needs.)"""
    page.locator("html[data-state=done], html[data-state=error]").wait_for(state="attached", timeout=timeout_ms)
    return page.locator("html").get_attribute("data-state")


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


def canned_sse(*events: tuple[str, dict]) -> str:
    return "".join(f"event: {name}\r\ndata: {json.dumps(data)}\r\n\r\n" for name, data in events)


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
    sources = [{**EVIL_SOURCES[1], "n": 2, "highlights": ["restart: systemctl restart dcache@dc-pool-07Domain.service"]}]
    done = {**QUOTED_DONE, "sources": sources}
    body = canned_sse(("sources", {"sources": sources}), ("delta", {"text": QUOTED_ANSWER}), ("done", done))
    page.route("**/v1/ask", lambda route: route.fulfill(status=200, body=body,
                                                        headers={"content-type": "text/event-stream"}))
    page.goto(f"{live_url}/")
    page.get_by_label("Question").fill("how was the pool restarted?")
    page.get_by_role("button", name="Ask").click()
    assert wait_finished(page) == "done"
    assert page.locator("#answer a.quote").all_inner_texts() == ["systemctl restart dcache@dc-pool-07Domain.service"]
    assert page.locator("#answer .literal.verified button.copy").count() == 1
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
        (422, {"detail": [{"loc": ["body", "top_k"], "msg": "Input should be greater than or equal to 1",
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
    assert seen[1]["body"] == {"question": "q", "stream": True, "top_k": 0}
    assert "top_k: Input should be greater than or equal to 1" in page.inner_text("#error")

    page.reload()  # the key is kept in localStorage
    assert page.get_by_label("API key").input_value() == "s3cret"
    page.get_by_label("Question").fill("q")
    page.get_by_label("Question").press("Enter")
    assert wait_finished(page) == "error"
    assert seen[2]["headers"]["authorization"] == "Bearer s3cret"
    assert "generation failed: boom" in page.inner_text("#error")
    assert page.inner_text("#answer") == "partial"  # what came before the error stays
    assert page.problems == []
