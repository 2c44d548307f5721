"""OpsCopilot as a Model Context Protocol server: ``search``, ``ask`` and ``get_document`` as tools
for agents and chat clients (Claude Desktop, Cursor, VS Code, Open WebUI's MCP bridge).

Built with the official ``mcp`` SDK (:class:`mcp.server.mcpserver.MCPServer`), over streamable
HTTP at ``/mcp`` in the web app (stateless, JSON responses: any replica answers any call) and
over stdio through ``copilot mcp``. The tools call the same use cases as the routes
(:mod:`copilot.serving.use_cases`, :func:`copilot.documents.readable_document`) and return the
same models: ``ask`` gives what ``POST /v1/ask`` gives for the same question, ``search`` what
``POST /v1/search`` gives, ``get_document`` what ``GET /v1/documents/{id}`` gives.

Keys and scopes are those of every route: over HTTP the ``Authorization: Bearer`` header is
checked before MCP sees the request (401 / 403 in the API's error format, as ``/v1/ask``); a
scoped key's tools search, answer from and read only its documents, and a document outside its
scope is "not found", as an unknown one. Over stdio the key is given at start (``copilot mcp``,
``COPILOT_MCP_API_KEY`` or ``--api-key``). Spec: https://modelcontextprotocol.io/specification (tools, streamable HTTP).
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

from fastapi import FastAPI, HTTPException, Request
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from copilot.access import FULL_ACCESS, Access, KeyRing
from copilot.api.dependencies import app_keyring, caller_access
from copilot.api.errors import error_body
from copilot.api.schemas.ask import AskRequest, AskResponse
from copilot.api.schemas.common import Int
from copilot.api.schemas.documents import DocumentDetail
from copilot.api.schemas.search import SearchResponse
from copilot.api.schemas.sources import SourceOut
from copilot.config import Settings
from copilot.documents import readable_document
from copilot.search.filters import Filters
from copilot.serving import use_cases
from copilot.serving.question_job import QuestionQueue

log = logging.getLogger(__name__)

#: ``max_sources`` as ``/v1/search`` and ``/v1/ask`` take it: a JSON integer 1..100, or unset.
MaxSources = Annotated[Int, Field(ge=1, le=100)] | None

#: What the server tells a client about itself (shown to the model that calls the tools).
INSTRUCTIONS = ("OpsCopilot answers questions about a computing-operations team's logbooks (ELOG, shift logs, "
                "post-mortems) and tickets (Jira, GGUS). Use `ask` for an answer with numbered citations and "
                "checked quotes (`not_found` true: the records do not hold the answer; `unverified`: literals "
                "found in no source; `destructive`: commands never to run as written); `search` for the best "
                "entries with their evidence lines, no model call; `get_document` for one entry's whole text.")


class CopilotMcp(MCPServer):
    """:class:`~mcp.server.mcpserver.MCPServer` that refuses arguments a tool does not take: the
    SDK drops them silently, so a client sending ``filter`` for ``filters`` would get an answer from
    every document instead of being told."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        """Call a tool (see :meth:`MCPServer.call_tool`).

        Raises:
            ToolError: an argument the tool does not take (named), or as :meth:`MCPServer.call_tool`.
        """
        tool = next((t for t in await self.list_tools() if t.name == name), None)
        if tool is not None:
            unknown = sorted(set(arguments) - set(tool.input_schema.get("properties", {})))
            if unknown:
                raise ToolError(f"{name}: unknown argument(s) {unknown}; it takes "
                                f"{sorted(tool.input_schema.get('properties', {}))}")
        return await super().call_tool(name, arguments, context)


def tool_access(app: FastAPI, ctx: Context[Any, Any]) -> Access:
    """What the caller of a tool may read: its key's scope (the ``Authorization`` header over HTTP,
    already checked by :class:`McpGate`; ``app.state.mcp_access`` over stdio, set by ``copilot
    mcp``), the public scope for an anonymous caller where the gate let one in, everything
    without configured keys.

    Raises:
        ToolError: no usable key (stdio started without one while keys are configured).
    """
    ring = app_keyring(app.state, app.state.settings)
    if not ring.enabled:
        return FULL_ACCESS
    headers = ctx.headers
    if headers is None:  # stdio
        access: Access | None = getattr(app.state, "mcp_access", None)
    else:
        header = headers.get("authorization") or ""
        scheme, _, token = header.partition(" ")
        access = ring.lookup(token.strip()) if scheme.lower() == "bearer" else None
        if access is None and not header:
            access = ring.public
    if access is None:
        raise ToolError("no valid API key: send 'Authorization: Bearer <key>' (stdio: copilot mcp --api-key)")
    return access


def _caller(ctx: Context[Any, Any]) -> str:
    """Who calls, for the reservation key: the credentials over HTTP, else the transport's name."""
    return (ctx.headers or {}).get("authorization") or "mcp-stdio"


def build_mcp(app: FastAPI) -> CopilotMcp:
    """The MCP server of ``app``: its tools read the service, the scheduler and the keys from
    ``app.state`` when called (set by the app's lifespan)."""
    server = CopilotMcp("opscopilot", title="OpsCopilot", instructions=INSTRUCTIONS, version="0.1.0")

    @server.tool()
    async def search(question: str, ctx: Context[Any, Any], max_sources: MaxSources = None,
                     filters: Filters | None = None) -> SearchResponse:
        """The best logbook entries and tickets for a question (hybrid dense + BM25 retrieval, one
        entry per document), each with the lines that best answer it. No model call: fast. Filters:
        doc_types (elog, shiftlog, postmortem, jira, csv_ticket, jsonl, text), source, ticket_key, since,
        until."""
        access = tool_access(app, ctx)
        started = time.perf_counter()
        try:
            found = await use_cases.search(app.state.service, question, max_sources,
                                           filters.to_search_filter() if filters else None, access)
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        return SearchResponse(sources=[SourceOut.from_source(s) for s in found],
                              retrieval_ms=round((time.perf_counter() - started) * 1000, 2))

    @server.tool()
    async def ask(question: str, ctx: Context[Any, Any], max_sources: MaxSources = None,
                  filters: Filters | None = None, max_new_tokens: Int | None = None) -> AskResponse:
        """Answer a question from the logbooks and tickets, citing sources as [n]. The answer's
        literals (commands, paths, hosts, values) are checked against the sources: `quotes` says
        where each was found, `unverified` lists those found in none; `not_found` is true when the
        records do not answer; `destructive` marks commands never to run as written."""
        access = tool_access(app, ctx)
        try:
            body = AskRequest(question=question, max_sources=max_sources, filters=filters,
                              max_new_tokens=max_new_tokens)
            queue = QuestionQueue(app.state.service, app.state.scheduler, app.state.metrics)
            answer = await use_cases.ask(queue, body.question_request(access), endpoint="mcp", caller=_caller(ctx))
        except Exception as exc:  # every refusal and failure is the tool's error, with the reason
            log.info("mcp ask failed: %s", exc)
            raise ToolError(str(exc) or type(exc).__name__) from exc
        return AskResponse.from_answer(answer)

    @server.tool()
    async def get_document(doc_id: str, ctx: Context[Any, Any]) -> DocumentDetail:
        """One stored entry or ticket with its whole text (its chunks in order), by the doc_id that
        `search` and `ask` give (e.g. tickets/jira_export.json#OPS-101)."""
        access = tool_access(app, ctx)
        document = readable_document(app.state.service.store, doc_id, access)
        if document is None:
            raise ToolError(f"no document with id {doc_id!r}")
        return DocumentDetail.from_document(document)

    return server


class McpGate:
    """The ASGI app in front of the MCP endpoint: the caller's key is checked as ``/v1/ask``
    checks it (:func:`copilot.api.dependencies.caller_access`) before MCP reads the request; a
    refused caller gets the API's 401 / 403 error body."""

    def __init__(self, app: FastAPI, inner: ASGIApp) -> None:
        self.app = app
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "POST":  # stateless: no stream to open, no session
            body = error_body("the MCP endpoint takes POST (streamable HTTP, stateless)", 405)
            await JSONResponse(body, 405, headers={"Allow": "POST"})(scope, receive, send)
            return
        if scope["type"] == "http":
            settings: Settings = self.app.state.settings
            try:
                caller_access(Request(scope), settings, ask=True)
            except HTTPException as exc:
                body = error_body(str(exc.detail), exc.status_code, None, getattr(exc, "code", None))
                await JSONResponse(body, exc.status_code, headers=exc.headers)(scope, receive, send)
                return
        await self.inner(scope, receive, send)


def mount_mcp(app: FastAPI, settings: Settings) -> CopilotMcp:
    """Serve the MCP server at ``/mcp`` (streamable HTTP, stateless, JSON responses: a GET or DELETE
    is a 405) behind :class:`McpGate`; run ``server.session_manager.run()`` in the app's lifespan.
    DNS-rebinding protection is on when the server binds a loopback address: the ``Host`` header must
    then name a loopback address (with or without a port)."""
    server = build_mcp(app)
    loopback = settings.host in ("127.0.0.1", "localhost", "::1")
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=[
        f"{h}{port}" for h in ("127.0.0.1", "localhost", "[::1]") for port in ("", ":*")],
        allowed_origins=[f"http://{h}:*" for h in ("127.0.0.1", "localhost", "[::1]")]) if loopback else None
    sub = server.streamable_http_app(streamable_http_path="/mcp", json_response=True, stateless_http=True,
                                     host=settings.host, transport_security=security)
    for route in sub.routes:
        if isinstance(route, Route):
            app.router.routes.append(Route(route.path, McpGate(app, route.app), methods=route.methods,
                                           include_in_schema=False))
    return server


def stdio_access(settings: Settings, api_key: str | None) -> Access:
    """The access of ``copilot mcp`` (stdio): the key's scope, everything without configured keys.

    Raises:
        ValueError: keys are configured and ``api_key`` is missing or not one of them.
    """
    ring = KeyRing.build([k.get_secret_value() for k in settings.api_keys], settings.keys)
    if not ring.enabled:
        return FULL_ACCESS
    if not api_key:
        raise ValueError("API keys are configured: pass one with --api-key (or COPILOT_MCP_API_KEY)")
    access = ring.lookup(api_key)
    if access is None:
        raise ValueError("invalid API key")
    return access


async def serve_stdio(app: FastAPI, access: Access) -> None:
    """Run ``app``'s lifespan (the models, the scheduler) and its MCP server over stdin/stdout
    until the client closes stdin; every tool call has ``access``. Logs go to stderr (stdout
    carries only the protocol)."""
    async with app.router.lifespan_context(app):
        app.state.mcp_access = access
        server: CopilotMcp = app.state.mcp
        await server.run_stdio_async()
