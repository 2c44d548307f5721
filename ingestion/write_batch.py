"""Value objects of one store write: the documents to (re)write, deletions, file fingerprints,
and what :meth:`ingestion.stores.chunk_store.ChunkStore.apply` changed."""

from __future__ import annotations

from dataclasses import dataclass, field

from ingestion.documents import Chunk, Document
from ingestion.stores.manifest import FileRecord


@dataclass
class DocumentWrite:
    """A document to (re)write with its chunks; ``source_abs`` is its file's absolute path (for pruning)."""

    document: Document
    chunks: list[Chunk]
    source_abs: str | None = None


@dataclass
class WriteBatch:
    """One unit of :meth:`ChunkStore.apply`: writes, deletions and completed-file fingerprints."""

    writes: list[DocumentWrite] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    files: list[FileRecord] = field(default_factory=list)
    forget_files: list[str] = field(default_factory=list)
    #: (doc_id, source_abs): unchanged documents whose file now lives at another absolute path
    relocate: list[tuple[str, str]] = field(default_factory=list)

    @property
    def n_chunks(self) -> int:
        """Chunks to embed and write."""
        return sum(len(w.chunks) for w in self.writes)

    def is_empty(self) -> bool:
        """True when applying would change nothing."""
        return not (self.writes or self.deletes or self.files or self.forget_files or self.relocate)


@dataclass(frozen=True)
class ApplyResult:
    """What :meth:`ChunkStore.apply` changed."""

    documents_written: int
    chunks_written: int
    documents_deleted: int
    embed_s: float = 0.0
