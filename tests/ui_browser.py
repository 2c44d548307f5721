"""The browser harness of the page tests: the real app served by uvicorn on 127.0.0.1, Debian's
``/usr/bin/chromium`` driven by Playwright (its own browser download is not used), a page
that records script errors, CSP violations and dialogs, and canned Server-Sent Events."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from copilot.api.app import create_app

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


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


def canned_sse(*events: tuple[str, dict]) -> str:
    return "".join(f"event: {name}\r\ndata: {json.dumps(data)}\r\n\r\n" for name, data in events)
