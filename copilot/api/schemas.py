"""Pydantic models for every request and response of the web API."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Collection, Literal
from urllib.parse import quote

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, Strict, model_validator
from pydantic.json_schema import JsonDict

from copilot.access import FULL_ACCESS, Access
from copilot.answer.assembly import Answer
from copilot.answer.prompting import ChatTurn
from copilot.answer.question import QuestionRequest
from copilot.api.footer import strip_sources_footer
from copilot.api.knobs import generation_params
from copilot.search.destructive import find_destructive
from copilot.search.filters import Filters, JSONObject, Text
from copilot.search.sources import Source
from decoding.config import SpeculationMode

#: A request's ``speculation`` (:data:`decoding.config.SpeculationMode`: the engine's
#: ``Speculation.mode``, the same values); the output is the same in every mode, only its speed differs.
SPECULATION_HELP = ("adaptive (default): the cost-aware policy alone, γ from the batch's cost when sharing passes; "
                    "off: no drafting; fixed: the n-gram drafter drafts num_speculative_tokens every round; "
                    "table: γ from a vLLM-style table by batch size")


#: Request numbers and flags are taken as JSON writes them, never converted: ``"10"``, ``true``
#: and ``10.0`` are no :data:`Int`, ``"no"`` and ``1`` no :data:`Bool`, ``"0.5"`` and ``true`` no
#: :data:`Number` (an integer is one); NaN and ±Infinity (``NaN``, ``1e999``) are no Number.
#: Query parameters (``?limit=10``) are strings by nature and are declared in the routes, lax.
Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Number = Annotated[float, Strict(), AllowInfNan(False)]

#: A seed for torch's generator (a signed 64-bit integer).
Seed = Annotated[Int, Field(ge=0, le=2**63 - 1)]


class HistoryMessage(BaseModel):
    """An earlier turn of the conversation."""

    role: Literal["user", "assistant"]
    content: Text = Field(max_length=20_000)


class AskRequest(BaseModel):
    """``POST /v1/ask``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"question": "How was the SRM_AUTHORIZATION_FAILURE on the FNAL link fixed?"},
        {"question": "Which command restarted dc-pool-07?", "max_sources": 3, "stream": True,
         "filters": {"doc_types": ["elog", "shiftlog"], "since": "2026-01-01"}}]})

    question: Text = Field(min_length=1, description="the operator's question")
    max_sources: Int | None = Field(None, ge=1, le=100, description="source documents to retrieve and show "
                                    "(default: the max_sources setting, else the prompt style's)")
    top_k: Int | None = Field(None, ge=1, le=100, deprecated=True, description="deprecated name of max_sources")
    max_new_tokens: Int | None = Field(None, ge=0, description="answer budget in tokens (default: the "
                                       "max_new_tokens setting; at most max_new_tokens_cap); 0 = retrieval "
                                       "only: the sources and their evidence lines with an empty answer")
    stream: Bool = Field(False, description="Server-Sent Events: deltas, then one final event")
    filters: Filters | None = None
    history: list[HistoryMessage] = Field(default_factory=list, max_length=50)
    temperature: Number = Field(0.0, ge=0.0, le=2.0, description="0 = greedy (exact)")
    top_p: Number = Field(1.0, gt=0.0, le=1.0)
    seed: Seed | None = None
    # Logits settings, honoured exactly as transformers' generate() applies them (unset = the
    # checkpoint's generation_config value, as generate() does).
    repetition_penalty: Number | None = Field(None, gt=0.0, le=10.0, description="CTRL repetition penalty (1 = off)")
    no_repeat_ngram_size: Int | None = Field(None, ge=0, le=64, description="no n-gram of this size repeats (0 = off)")
    min_new_tokens: Int | None = Field(None, ge=0, description="end-of-sequence forbidden before this many tokens")
    bad_words_ids: list[list[Annotated[Int, Field(ge=0)]]] | None = Field(
        None, max_length=1024, description="token-id sequences never generated")
    suppress_tokens: list[Annotated[Int, Field(ge=0)]] | None = Field(None, max_length=4096,
                                                                     description="token ids never generated")
    logit_bias: dict[Text, Number] | None = Field(None,
                                                  description="OpenAI logit_bias: {token id: bias in [-100, 100]}")
    frequency_penalty: Number = Field(0.0, ge=-2.0, le=2.0, description="OpenAI frequency penalty")
    presence_penalty: Number = Field(0.0, ge=-2.0, le=2.0, description="OpenAI presence penalty")
    speculation: SpeculationMode | None = Field(None, description=SPECULATION_HELP)
    num_speculative_tokens: Int | None = Field(None, ge=1, le=16,
                                               description="γ ceiling per round (default: settings)")

    @model_validator(mode="before")
    @classmethod
    def _one_name(cls, data: Any) -> Any:
        """``top_k`` (deprecated) is read as ``max_sources``."""
        if isinstance(data, dict) and data.get("top_k") is not None:
            if data.get("max_sources") is not None and data["max_sources"] != data["top_k"]:
                raise ValueError("max_sources and its deprecated name top_k disagree; send max_sources only")
            data = {**data, "max_sources": data["top_k"]}
        return data

    def question_request(self, access: Access = FULL_ACCESS) -> QuestionRequest:
        """The request for :meth:`copilot.service.CopilotService.question`, every knob under its own name."""
        return QuestionRequest(self.question, max_sources=self.max_sources,
                               flt=self.filters.to_search_filter() if self.filters else None,
                               history=tuple(ChatTurn(m.role, strip_sources_footer(m.content) if m.role == "assistant"
                                                      else m.content) for m in self.history), access=access,
                               generation=generation_params(self, self.max_new_tokens))


class ChunkMatch(BaseModel):
    """A chunk of a source that retrieval matched."""

    chunk_id: str
    score: float = Field(description="fused retrieval score (weighted RRF sum, ~0.1-0.3; key matches ~10)")


class DestructiveOut(BaseModel):
    """A destructive command (:mod:`copilot.search.destructive`) in an evidence line or in the answer:
    shown marked; check it before running anything like it."""

    command: str = Field(description="the command as written")
    reason: str = Field(description="why it is destructive")
    rule: str = Field(description="the rule that matched (rm-recursive-root, mkfs, drop-database, ...)")
    start: int = Field(description="character offset in the evidence line, or in the answer")
    end: int
    highlight: int | None = Field(None, description="in sources[].destructive: index of the evidence line")


def destructive_marks(highlights: Collection[str]) -> list[DestructiveOut]:
    """The destructive commands of each evidence line, with the line's index."""
    return [DestructiveOut(**m.to_dict(), highlight=i) for i, line in enumerate(highlights)
            for m in find_destructive(line)]


class SourceOut(BaseModel):
    """A source document: ``[n]`` in the answer refers to ``n`` here; no document appears twice."""

    n: int
    doc_id: str
    source: str
    title: str
    key: str | None = Field(None, description="ELOG MID or ticket key")
    doc_type: str | None = None
    created: str | None = Field(None, description="when the entry was written (ISO 8601), if known")
    url: str = Field(description="the document with its chunks (GET, relative to this server)")
    highlights: list[str] = Field(description="the 1-3 lines of the document that best answer the question, best "
                                  "first")
    destructive: list[DestructiveOut] = Field(default_factory=list, description="destructive commands in the "
                                              "evidence lines (rm -rf /, mkfs, dd of=/dev/..., DROP TABLE, ...)")
    snippet: str = Field(description="the start of the best matching chunk")
    score: float = Field(description="its best chunk's fused retrieval score")
    cited: bool = Field(False, description="the answer cites it")
    supports: bool = Field(False, description="it holds a literal the answer quotes (the citation by support)")
    chunks: list[ChunkMatch] = Field(description="the document's matched chunks, best first")

    @classmethod
    def from_source(cls, s: Source, cited: Collection[int] = (), supported: Collection[int] = ()) -> "SourceOut":
        """The API view of a prompt source."""
        meta = s.metadata
        key = meta.get("ticket_key") or meta.get("mid")
        created = meta.get("created")
        return cls(n=s.n, doc_id=s.doc_id, source=str(meta.get("source", "")), title=str(meta.get("title") or ""),
                   key=None if key is None else str(key), doc_type=meta.get("doc_type"),
                   created=None if created is None else str(created),
                   url=f"/v1/documents/{quote(s.doc_id, safe='')}", highlights=list(s.highlights),
                   destructive=destructive_marks(s.highlights),
                   snippet=s.passages[0].snippet(), score=round(s.score, 6), cited=s.n in cited,
                   supports=s.n in supported,
                   chunks=[ChunkMatch(chunk_id=p.chunk.chunk_id, score=round(p.score, 6)) for p in s.passages])


class QuoteOut(BaseModel):
    """A literal of the answer found verbatim (whitespace-normalised) in a shown source."""

    literal: str = Field(description="the literal as the answer writes it")
    kind: str = Field(description="code | command | path | setting | error | host | name | ticket | date | value")
    answer_start: int = Field(description="character offset of the literal in the answer")
    answer_end: int
    n: int = Field(description="the source that holds it ([n])")
    doc_id: str
    chunk_id: str
    start: int = Field(description="character offset in that chunk's text (GET the document's chunks)")
    end: int
    highlight: int | None = Field(None, description="index of the source's evidence line that holds it")
    cited: int | None = Field(None, description="the source the answer cites for it (the first [k] after it on its "
                              "line); when it differs from n, the answer's text says so in a labelled source check")


class UnverifiedOut(BaseModel):
    """A literal of the answer found in no shown source: check it before running it."""

    literal: str
    kind: str
    answer_start: int
    answer_end: int
    in_question: bool = Field(False, description="the question names it (the sources do not)")


class AskResponse(BaseModel):
    """``POST /v1/ask`` (non-streaming): ``[n]`` in ``answer`` cites ``sources[n-1]``."""

    answer: str
    sources: list[SourceOut]
    cited: list[int] = Field(description="source numbers the answer cites, in order of first citation")
    supported: list[int] = Field(default_factory=list, description="source numbers that hold the answer's quoted "
                                 "literals, in order of first quote (the citations by support)")
    quotes: list[QuoteOut] = Field(default_factory=list, description="literals of the answer found in a source")
    unverified: list[UnverifiedOut] = Field(default_factory=list, description="literals of the answer found in no "
                                            "source: not in the sources, check before running")
    not_found: bool = Field(False, description="the sources do not answer the question: the answer says so and "
                            "lists the closest entries (stats.grounding.reason says why)")
    destructive: list[DestructiveOut] = Field(default_factory=list, description="destructive commands in the "
                                              "answer: never run them as they are")
    stats: dict[str, Any]

    @classmethod
    def from_answer(cls, answer: Answer) -> "AskResponse":
        """The response for a finished answer."""
        return cls(**ask_fields(answer))


def trust_fields(answer: Answer) -> dict[str, Any]:
    """An answer's ``quotes``, ``unverified``, ``not_found`` and ``destructive`` (its destructive
    commands, :mod:`copilot.search.destructive`) as every response carries them (JSON values)."""
    return {"quotes": [q.to_dict() for q in answer.quotes], "unverified": [u.to_dict() for u in answer.unverified],
            "not_found": answer.not_found, "destructive": [m.to_dict() for m in find_destructive(answer.text)]}


def sources_out(answer: Answer) -> list[SourceOut]:
    """The API view of an answer's sources, each marked when the answer cites it."""
    return [SourceOut.from_source(s, answer.cited, answer.supported) for s in answer.sources]


def ask_fields(answer: Answer) -> dict[str, Any]:
    """The :class:`AskResponse` of an answer as JSON values (the data of ``/v1/ask``'s streamed
    ``done`` event)."""
    return {"answer": answer.text, "sources": [s.model_dump() for s in sources_out(answer)], "cited": answer.cited,
            "supported": answer.supported, **trust_fields(answer), "stats": answer.stats}


class SearchRequest(BaseModel):
    """``POST /v1/search``: retrieval only, no model call."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"question": "dc-pool-07 disk failure", "max_sources": 5, "filters": {"doc_types": ["jira"]}}]})

    question: Text = Field(min_length=1, description="what to look for (a question or keywords)")
    max_sources: Int | None = Field(None, ge=1, le=100, description="documents to return (default: the "
                                    "max_sources setting, else the prompt style's)")
    filters: Filters | None = None


class SearchResponse(BaseModel):
    """``POST /v1/search``: the best documents, best first, with their evidence lines."""

    sources: list[SourceOut]
    retrieval_ms: float


class ErrorBody(BaseModel):
    """OpenAI's error object: ``message`` says why; ``param`` names the request field at fault."""

    message: str
    type: str = Field(description="invalid_request_error | authentication_error | permission_error | "
                      "rate_limit_error | server_error")
    param: str | None = None
    code: str | None = Field(None, description="e.g. invalid_value, missing_required_parameter, "
                             "unsupported_parameter, model_not_found, invalid_api_key, permission_denied, "
                             "server_overloaded")


class ErrorResponse(BaseModel):
    """Every 4xx/5xx body under ``/v1``: OpenAI's ``error`` object, and ``detail`` as FastAPI
    writes it (the message, or the list of validation errors)."""

    error: ErrorBody
    detail: Any = Field(description="the message, or for a 400 validation error the list of errors")


class HealthResponse(BaseModel):
    """``GET /healthz``: the process is up."""

    status: Literal["ok"]


class ReadyResponse(BaseModel):
    """``GET /readyz``: whether the model is loaded and the store answers, and which draft model runs."""

    status: Literal["ready", "not ready"]
    model_loaded: bool
    store_reachable: bool
    chunks: int | None = None
    detail: str | None = None
    draft_model: str | None = Field(None, description="the draft model in use, or why none (building, refused "
                                    "by its calibration, not configured)")
    dense_index: Literal["ok", "degraded"] | None = Field(
        None, description="degraded: the dense index is damaged or being rebuilt, search is lexical only (still "
        "ready); the reason is in dense_index_detail")
    dense_index_detail: str | None = None
    cpu: str | None = Field(None, description="the CPU and the instruction sets llama.cpp's kernels use on it")


class RebuildOut(BaseModel):
    """The latest rebuild of the dense index this server started (``POST /v1/index/reindex``)."""

    running: bool
    done: int = Field(description="chunks handled so far")
    total: int = Field(description="chunks in all (0 until counted)")
    started_at: datetime
    finished_at: datetime | None = None
    error: str | None = Field(None, description="why it failed (run it again to resume)")


class IndexStatus(BaseModel):
    """``GET /v1/index``, ``POST /v1/index/reindex``: whether dense search works, and the latest rebuild."""

    dense_index: Literal["ok", "degraded"]
    detail: str | None = Field(None, description="the damaged file, or the unfinished rebuild, and what repairs it")
    chunks: int = Field(description="chunks the store keeps (what a rebuild embeds)")
    rebuild: RebuildOut | None = None


# -- documents ----------------------------------------------------------------------------------
class DocumentOut(BaseModel):
    """A stored document (one logbook entry, shift, post-mortem or ticket)."""

    doc_id: str = Field(description="source path + '#' + entry key, e.g. tickets/jira_export.json#OPS-101")
    source: str
    doc_type: str | None = None
    title: str | None = None
    key: str | None = Field(None, description="ELOG MID, ticket key, shift name or record id")
    created: datetime | None = None
    n_chunks: int

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "DocumentOut":
        ts = row.get("created_ts")
        return cls(doc_id=row["doc_id"], source=row["source"], doc_type=row.get("doc_type"), title=row.get("title"),
                   key=row.get("key"), created=datetime.fromtimestamp(ts, timezone.utc) if ts is not None else None,
                   n_chunks=int(row.get("n_chunks") or 0))


class DocumentPage(BaseModel):
    """``GET /v1/documents``: one page, ordered by source then id."""

    total: int
    offset: int
    limit: int
    documents: list[DocumentOut]


class ChunkOut(BaseModel):
    """One chunk of a stored document, as indexed."""

    chunk_id: str
    text: str


class DocumentDetail(DocumentOut):
    """``GET /v1/documents/{doc_id}``: the document with its chunks."""

    chunks: list[ChunkOut]


class DeleteResponse(BaseModel):
    """What ``DELETE /v1/documents/{doc_id}`` removed."""

    deleted: str = Field(description="the deleted document id")
    chunks: int = Field(description="chunks removed")


# -- ingest ---------------------------------------------------------------------------------------
class IngestPathRequest(BaseModel):
    """``POST /v1/ingest`` with JSON: ingest a server-side file or folder under ``ingest_root``."""

    model_config = ConfigDict(extra="forbid",
                              json_schema_extra={"examples": [{"path": "tickets/2026-q1", "prune": True}]})

    path: Text = Field(min_length=1, max_length=4096,
                      description="relative to the ingest root, or absolute inside it; no '..'")
    prune: Bool = Field(False, description="delete documents whose source file is gone or whose entry vanished")


class IngestProgressOut(BaseModel):
    """How far a running ingest job is."""

    files_done: int = 0
    files_total: int = 0
    current: str | None = None
    documents_written: int = 0
    chunks_written: int = 0
    elapsed_s: float = 0.0
    records_done: int = Field(0, description="records of the current file examined so far")
    records_total: int = Field(0, description="records in the current file (0 until it is loaded)")
    bytes_done: int = Field(0, description="bytes of the files done plus the done share of the current one")
    bytes_total: int = Field(0, description="bytes of every file of the job")
    eta_s: float | None = Field(None, description="estimated seconds left (null until some work is done)")


class IngestJobOut(BaseModel):
    """An ingest job: ``report`` (the per-file ingest report) is set once it finished."""

    id: str
    kind: Literal["upload", "path"]
    status: Literal["queued", "running", "succeeded", "partial", "failed", "interrupted"] = Field(
        description="succeeded: every file and record was stored (or unchanged, or skipped); partial: some files "
        "or records failed (report.counts, report.failed_records), the others were stored; failed: no file was "
        "stored, or the run stopped (error); interrupted: its replica stopped before it finished. "
        "POST /v1/ingest/{id}/resume runs an interrupted, failed or partial job again")
    created: datetime
    started: datetime | None = None
    finished: datetime | None = None
    files: list[str] = Field(description="the files to ingest, as sources")
    progress: IngestProgressOut
    report: dict[str, Any] | None = None
    error: str | None = None
    warnings: list[str] = []
    replica: str | None = Field(None, description="the API replica that runs (or ran) the job")
    submitted_by: str | None = Field(None, description="the name of the scoped API key that started it (a key "
                                     "that may not read everything sees only its own jobs)")


class IngestJobList(BaseModel):
    """``GET /v1/ingest``: ingest jobs of every replica, newest first."""

    jobs: list[IngestJobOut]
    total: int
    offset: int
    limit: int


class IngestAccepted(BaseModel):
    """``POST /v1/ingest`` (and ``/v1/ingest/{id}/resume``) → 202: poll ``status_url``."""

    id: str
    status: Literal["queued", "running", "succeeded", "partial", "failed", "interrupted"]
    status_url: str
    files: list[str]


# -- feedback -------------------------------------------------------------------------------------
class FeedbackSource(BaseModel):
    """A source the rated answer showed (as ``sources[]`` of ``POST /v1/ask`` named it)."""

    model_config = ConfigDict(extra="forbid")

    n: Int = Field(ge=1, le=1000, description="its number: [n] in the answer")
    doc_id: Text = Field(min_length=1, max_length=4096, description="the document id")
    title: Text | None = Field(None, max_length=2000)
    cited: Bool = Field(False, description="the answer cites it")


class FeedbackQuote(BaseModel):
    """A literal of the rated answer found in a source (as ``quotes[]`` of ``POST /v1/ask`` named it)."""

    model_config = ConfigDict(extra="forbid")

    literal: Text = Field(min_length=1, max_length=20_000)
    kind: Text = Field("", max_length=32, description="code | command | path | setting | error | host | ...")
    n: Int = Field(ge=1, le=1000, description="the source that holds it")
    doc_id: Text = Field(min_length=1, max_length=4096)


_FEEDBACK_EXAMPLE: JsonDict = {
    "rating": "up", "reason": "the exact command, and the right ELOG entry",
    "question": "How was the dc-pool-07 domain restarted once the RAID rebuild had finished?",
    "answer": "It was restarted with `systemctl restart dcache@dc-pool-07Domain.service` [1].",
    "history": [], "not_found": False,
    "sources": [{"n": 1, "doc_id": "logbooks/operations.elog#2", "title": "dc-pool-07 back in service", "cited": True}],
    "quotes": [{"literal": "systemctl restart dcache@dc-pool-07Domain.service", "kind": "code", "n": 1,
                "doc_id": "logbooks/operations.elog#2"}],
    "settings": {"max_sources": 3, "filters": {"doc_types": ["elog"], "since": "2026-01-01"}}}


class FeedbackRequest(BaseModel):
    """``POST /v1/feedback``: a 👍/👎 on an answer, with what was asked and answered."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [_FEEDBACK_EXAMPLE]})

    rating: Literal["up", "down"] = Field(description="up: 👍 (the answer was right), down: 👎")
    reason: Text | None = Field(None, max_length=2000, description="why (optional)")
    question: Text = Field(min_length=1, max_length=20_000, description="the question the answer answers")
    answer: Text = Field(max_length=100_000, description="the answer as shown ([n] cites sources[n])")
    history: list[HistoryMessage] = Field(default_factory=list, max_length=50,
                                          description="the earlier turns the question was asked with")
    sources: list[FeedbackSource] = Field(default_factory=list, max_length=200)
    quotes: list[FeedbackQuote] = Field(default_factory=list, max_length=1000)
    not_found: Bool = Field(False, description="the answer said the sources do not answer the question")
    settings: JSONObject = Field(default_factory=dict, description="the request options the answer was asked with "
                                 "(max_sources, max_new_tokens, filters, ...), as sent to POST /v1/ask")

    @model_validator(mode="after")
    def _sources_named_once(self) -> "FeedbackRequest":
        """Every source number once; every quote names a listed source."""
        numbers = [s.n for s in self.sources]
        repeated = sorted({n for n in numbers if numbers.count(n) > 1})
        if repeated:
            raise ValueError(f"sources: the numbers {repeated} appear more than once")
        unknown = sorted({q.n for q in self.quotes} - set(numbers))
        if unknown:
            raise ValueError(f"quotes: n {unknown} names no source in sources")
        return self


class FeedbackOut(FeedbackRequest):
    """A stored rating."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [{
        **_FEEDBACK_EXAMPLE, "id": "fb-3f2a9c0d1e4b5a6c", "created": "2026-01-27T10:00:00Z",
        "model": "embedded:qwen2.5-coder-0.5b-instruct"}]})

    id: str = Field(description="fb- and 16 hex digits")
    created: datetime
    model: str | None = Field(None, description="the target model that answered (this server's at the time)")


class FeedbackCreated(BaseModel):
    """``POST /v1/feedback`` → 201."""

    id: str
    created: datetime


class FeedbackPage(BaseModel):
    """``GET /v1/feedback``: one page, newest first."""

    total: int
    offset: int
    limit: int
    feedback: list[FeedbackOut]
