"""``GET /``: a small page to ask questions from (plain HTML, a few ES modules, two stylesheets).

Everything the page needs is served by the app from ``copilot/api/static`` (no build step, no
CDN): ``app.js`` (asking, the page's state) imports ``answer.js`` (an answer's code, citations
and checked literals), ``sources.js`` (source cards), ``conversation.js`` (earlier turns, sent
as ``history``), ``docview.js`` (the document view), ``feedback.js`` (👍/👎), ``sse.js`` and
``dom.js``. The page talks to ``POST /v1/ask`` with ``"stream": true``, ``GET
/v1/documents/{id}`` and ``POST /v1/feedback``, and renders every field with ``textContent``;
a strict Content-Security-Policy (scripts, styles and connections from this origin only)
backs that up.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

#: Headers for the page itself: no inline script or style, no framing, nothing from elsewhere.
PAGE_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(tags=["ui"])
router.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


@router.get("/", include_in_schema=False)
async def index() -> FileResponse:
    """The question page."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)
