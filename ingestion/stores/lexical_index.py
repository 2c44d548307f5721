"""Lexical index over chunk texts: SQLite FTS5 (BM25) or PostgreSQL full-text search.

Table ``chunks`` holds every chunk (text, metadata JSON, filter columns) in either database.

- SQLite (:class:`Fts5LexicalIndex`): the FTS5 table ``chunks_fts`` indexes its text as an
  external-content table kept in step by triggers, so adding or deleting a document touches
  only its own rows (no rebuild). Tokenizer: ``porter unicode61 remove_diacritics 2``;
  ranking: FTS5's ``bm25()`` (Robertson & Zaragoza, "The Probabilistic Relevance Framework:
  BM25 and Beyond", 2009; k1 = 1.2, b = 0.75).
- PostgreSQL (:class:`PostgresLexicalIndex`): a stored ``tsvector`` column
  (``to_tsvector('english', text)``, Snowball stemming) with a GIN index; ranking: BM25's IDF
  times the server's ``ts_rank`` (term frequency, divided by 1 + log of the chunk length) per
  query word, summed — PostgreSQL ships no BM25, and ``ts_rank`` alone has no IDF, which let
  common words outrank rare ones. Retrieval quality on both is measured side by side
  (``copilot eval retrieval``; see evals/results/README.md, shared store).

Queries are built from user text by :func:`fts_query`, never passed through: each
whitespace-separated word becomes a quoted term, or a quoted phrase when it contains
punctuation (``OPS-107`` -> ``"OPS 107"``, ``SRM_AUTHORIZATION_FAILURE`` ->
``"SRM AUTHORIZATION FAILURE"``), OR-ed together; quotes, colons, parentheses and FTS
operators in the input therefore cannot cause syntax errors.
Scores are ``-bm25()`` (higher is better).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ingestion.documents import Chunk, SearchFilter
from ingestion.stores.database import Database

_WORD_PART_RE = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how i in is it of on or so that the this "
    "to was were what when where which who why with".split()
)
MAX_QUERY_TERMS = 64

FTS5_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    rowid INTEGER PRIMARY KEY,
    chunk_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    text TEXT NOT NULL,
    metadata_json TEXT NOT NULL,
    source TEXT,
    doc_type TEXT,
    key TEXT,
    created_ts INTEGER
);
CREATE INDEX IF NOT EXISTS chunks_doc_id ON chunks(doc_id, chunk_index);
CREATE INDEX IF NOT EXISTS chunks_source ON chunks(source);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    text, content='chunks', content_rowid='rowid', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
CREATE TRIGGER IF NOT EXISTS chunks_au AFTER UPDATE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
    INSERT INTO chunks_fts(rowid, text) VALUES (new.rowid, new.text);
END;
"""


POSTGRES_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    rowid BIGSERIAL PRIMARY KEY,
    chunk_id TEXT NOT NULL UNIQUE,
    doc_id TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    text TEXT NOT NULL,
    metadata_json TEXT NOT NULL,
    source TEXT,
    doc_type TEXT,
    key TEXT,
    created_ts BIGINT,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
);
CREATE INDEX IF NOT EXISTS chunks_doc_id ON chunks(doc_id, chunk_index);
CREATE INDEX IF NOT EXISTS chunks_source ON chunks(source);
CREATE INDEX IF NOT EXISTS chunks_tsv ON chunks USING GIN (tsv);
"""


def query_words(text: str) -> list[tuple[str, str]]:
    """The search words of arbitrary user text as ``(word, term)`` pairs: ``word`` as written
    (whitespace-separated), ``term`` its word characters space-joined (``OPS-107`` → ``OPS 107``);
    deduplicated by term case-insensitively, stop words dropped unless nothing else is left, at
    most :data:`MAX_QUERY_TERMS`."""
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for word in text.split():
        parts = _WORD_PART_RE.findall(word)
        if not parts:
            continue
        term = " ".join(parts)
        low = term.lower()
        if low in seen:
            continue
        seen.add(low)
        pairs.append((word, term))
    content = [p for p in pairs if p[1].lower() not in _STOPWORDS]
    return (content or pairs)[:MAX_QUERY_TERMS]


def fts_query(text: str) -> str | None:
    """Safe FTS5 MATCH expression for arbitrary user text, or None when it has no word characters."""
    terms = [term for _, term in query_words(text)]
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


def _chunk_from_row(row: Sequence[Any]) -> Chunk:
    chunk_id, doc_id, text, metadata_json = row[0], row[1], row[2], row[3]
    return Chunk(chunk_id=chunk_id, doc_id=doc_id, text=text, metadata=json.loads(metadata_json))


def folder_sql(folders: Sequence[str]) -> tuple[str, list[Any]]:
    """``c.source`` equal to or under one of ``folders`` (whole path segments) as one SQL
    condition and its parameters. A prefix is compared with ``substr`` rather than ``LIKE``:
    SQLite's ``LIKE`` ignores ASCII case (``Tickets/Security`` would pass for
    ``tickets/security``) and gives ``%`` and ``_`` in a folder name a meaning; ``substr``
    compares characters exactly, in SQLite and PostgreSQL alike."""
    if not folders:
        return "FALSE", []
    params: list[Any] = []
    for folder in folders:
        params += [folder, len(folder) + 1, folder + "/"]
    return "(" + " OR ".join(["(c.source = ? OR substr(c.source, 1, ?) = ?)"] * len(folders)) + ")", params


def filter_sql(flt: SearchFilter | None) -> tuple[str, list[Any]]:
    """A :class:`SearchFilter` as SQL conditions on the filter columns (doc_type, source, key,
    created_ts) of the table aliased ``c``: ``(" AND c.doc_type IN (?,?) ...", params)``, or
    ``("", [])`` for no filter; ``match_none`` is ``" AND FALSE"``. Shared by the lexical
    index, the pgvector table and the manifest's document list."""
    if flt is None:
        return "", []
    if flt.match_none:
        return " AND FALSE", []
    clauses: list[str] = []
    params: list[Any] = []
    if flt.source_folders:
        clause, folder_params = folder_sql(flt.source_folders)
        clauses.append(clause)
        params.extend(folder_params)
    if flt.doc_types:
        clauses.append(f"c.doc_type IN ({','.join('?' * len(flt.doc_types))})")
        params.extend(flt.doc_types)
    if flt.source is not None:
        clauses.append("c.source = ?")
        params.append(flt.source)
    if flt.ticket_key is not None:
        clauses.append("c.key = ?")
        params.append(flt.ticket_key)
    if flt.since_ts is not None:
        clauses.append("c.created_ts >= ?")
        params.append(int(flt.since_ts))
    if flt.until_ts is not None:
        clauses.append("c.created_ts <= ?")
        params.append(int(flt.until_ts))
    return "".join(f" AND {c}" for c in clauses), params


class LexicalIndex:
    """Chunk rows and their full-text index (the dialect's subclass creates and searches it).

    Methods that write do not commit: the caller groups them in one transaction with the
    manifest update.
    """

    schema: str = ""

    def __init__(self, db: Database) -> None:
        self.db = db
        db.executescript(self.schema)

    def insert_chunks(self, chunks: Iterable[Chunk]) -> None:
        """Insert chunk rows (the full-text index follows)."""
        self.db.executemany(
            "INSERT INTO chunks(chunk_id, doc_id, chunk_index, text, metadata_json, source, doc_type, key, created_ts)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            [
                (c.chunk_id, c.doc_id, int(c.metadata.get("chunk_index", 0)), c.text,
                 json.dumps(c.metadata, ensure_ascii=False, default=str), c.metadata.get("source"),
                 c.metadata.get("doc_type"), c.metadata.get("key"),
                 c.metadata.get("created_ts") if isinstance(c.metadata.get("created_ts"), int) else None)
                for c in chunks
            ],
        )

    def delete_documents(self, doc_ids: Iterable[str]) -> None:
        """Delete every chunk row of these documents."""
        self.db.executemany("DELETE FROM chunks WHERE doc_id = ?", [(d,) for d in doc_ids])

    def document_chunks(self, doc_id: str) -> list[Chunk]:
        """A document's chunks in order."""
        rows = self.db.query(
            "SELECT chunk_id, doc_id, text, metadata_json FROM chunks WHERE doc_id = ? ORDER BY chunk_index",
            (doc_id,))
        return [_chunk_from_row(r) for r in rows]

    def get_chunks(self, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        """Chunks by id (missing ids absent)."""
        out: dict[str, Chunk] = {}
        ids = list(chunk_ids)
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            rows = self.db.query(
                "SELECT chunk_id, doc_id, text, metadata_json FROM chunks "
                f"WHERE chunk_id IN ({','.join('?' * len(part))})", part)
            out.update((r[0], _chunk_from_row(r)) for r in rows)
        return out

    def search(self, query: str, k: int, flt: SearchFilter | None = None) -> list[tuple[Chunk, float]]:
        """Top ``k`` chunks for free text ``query`` (any user text is accepted), best first;
        the score is higher for better matches."""
        raise NotImplementedError

    def chunk_ids(self) -> list[str]:
        """Every stored chunk id, in id order."""
        return [str(r[0]) for r in self.db.query("SELECT chunk_id FROM chunks ORDER BY chunk_id")]

    def count(self) -> int:
        """Number of chunk rows."""
        return int(self.db.query("SELECT COUNT(*) FROM chunks")[0][0])

    def scrub(self) -> None:
        """After deletions: remove what the full-text index still keeps of deleted chunks
        (nothing to do here: PostgreSQL's GIN entries go with ``VACUUM``)."""

    def compact(self) -> None:
        """Rewrite the full-text index in its most compact form (nothing to do here)."""


FTS5_SECURE_DELETE_SINCE = (3, 42, 0)
"""SQLite version whose FTS5 has the ``secure-delete`` option (https://sqlite.org/fts5.html)."""


def fts5_secure_delete_available(version: str | None = None) -> bool:
    """Whether this SQLite's FTS5 has ``secure-delete`` (``version``: default the runtime's)."""
    parts = tuple(int(p) for p in (version or sqlite3.sqlite_version).split(".")[:3])
    return parts >= FTS5_SECURE_DELETE_SINCE


class Fts5LexicalIndex(LexicalIndex):
    """SQLite FTS5 with BM25 ranking (score = ``-bm25()``).

    Deleting a row only appends a "delete" entry to FTS5's segments: the deleted chunk's
    terms and positions stay in the older segments until they are merged. With SQLite >=
    3.42 the table's ``secure-delete`` option is set, so a deletion removes them at once
    (such a table cannot be opened by an older SQLite afterwards); before that,
    :meth:`scrub` merges every segment into one (FTS5 ``optimize``), which drops them.
    """

    schema = FTS5_SCHEMA

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.secure_delete = fts5_secure_delete_available()
        if self.secure_delete and not db.query("SELECT v FROM chunks_fts_config WHERE k = 'secure-delete' AND v = 1"):
            db.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('secure-delete', 1)")

    def scrub(self) -> None:
        """Remove deleted chunks' terms from the FTS5 segments (``optimize`` unless
        ``secure-delete`` already did; cost: one pass over the whole index)."""
        if not self.secure_delete:
            self.compact()

    def compact(self) -> None:
        """Merge every FTS5 segment into one (FTS5 ``optimize``)."""
        self.db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")

    def search(self, query: str, k: int, flt: SearchFilter | None = None) -> list[tuple[Chunk, float]]:
        match = fts_query(query)
        if match is None or k <= 0:
            return []
        where, params = filter_sql(flt)
        rows = self.db.query(
            "SELECT c.chunk_id, c.doc_id, c.text, c.metadata_json, bm25(chunks_fts) AS rank "
            "FROM chunks_fts JOIN chunks c ON c.rowid = chunks_fts.rowid "
            f"WHERE chunks_fts MATCH ?{where} ORDER BY rank LIMIT ?",
            [match, *params, int(k)])
        return [(_chunk_from_row(r), -float(r[4])) for r in rows]


class PostgresLexicalIndex(LexicalIndex):
    """PostgreSQL full-text search ranked the BM25 way: Σ over the query's words of BM25's IDF
    (``ln(1 + (N - df + 0.5) / (df + 0.5))``, df counted on the GIN index) times the server's
    length-normalised term-frequency rank (``ts_rank(tsv, word, 1)``). Each word is parsed as a
    phrase by the same parser as the documents (so ``OPS-107`` and ``dc-pool-14`` match as
    written); ties are broken by chunk id so results are deterministic."""

    schema = POSTGRES_SCHEMA

    def search(self, query: str, k: int, flt: SearchFilter | None = None) -> list[tuple[Chunk, float]]:
        words = [word for word, _ in query_words(query)]
        if not words or k <= 0:
            return []
        terms = ", ".join(["(phraseto_tsquery('english', ?))"] * len(words))
        where, params = filter_sql(flt)
        rows = self.db.query(
            f"WITH terms(q) AS (VALUES {terms}), "
            "n AS (SELECT COUNT(*) AS n FROM chunks), "
            "idf AS (SELECT t.q, ln(1 + (n.n - d.df + 0.5) / (d.df + 0.5)) AS w FROM terms t, n, "
            "LATERAL (SELECT COUNT(*) AS df FROM chunks WHERE tsv @@ t.q) d WHERE numnode(t.q) > 0) "
            "SELECT c.chunk_id, c.doc_id, c.text, c.metadata_json, SUM(idf.w * ts_rank(c.tsv, idf.q, 1)) AS score "
            f"FROM chunks c JOIN idf ON c.tsv @@ idf.q WHERE TRUE{where} "
            "GROUP BY c.rowid ORDER BY score DESC, c.chunk_id LIMIT ?",
            [*words, *params, int(k)])
        return [(_chunk_from_row(r), float(r[4])) for r in rows]


def lexical_index(db: Database) -> LexicalIndex:
    """The lexical index for the database's dialect (tables created when missing)."""
    return PostgresLexicalIndex(db) if db.dialect == "postgresql" else Fts5LexicalIndex(db)
