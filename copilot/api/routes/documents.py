"""``GET /v1/documents`` (paged), ``GET`` and ``DELETE /v1/documents/{doc_id}``.

Document ids contain ``/`` and ``#`` (``tickets/jira_export.json#OPS-101``): the route
takes the rest of the path, so ``/`` may be sent as is, but ``#`` must be sent as ``%23``
(clients treat a raw ``#`` as the start of a fragment). Percent-encoding the whole id
(``%2F``, ``%23``) works too.

Reading needs an API key when keys are configured, unless ``public_reads``; deleting
always needs one then, with the ``delete`` right. A key sees only the documents its scope
may read: the list is filtered in the store, and any other id answers 404, exactly as an
unknown one (so a key does not learn which documents exist outside its scope).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, HTTPException, Query, status

from copilot.api.dependencies import DeleteAccess, FeedbackDep, ReadAccess, ServiceDep, StoreDep
from copilot.api.openapi import error_responses
from copilot.api.schemas.documents import DeleteResponse, DocumentDetail, DocumentOut, DocumentPage
from copilot.deletion import delete_document as delete_stored_document
from copilot.documents import document_page, readable_document
from copilot.search.filters import Text

router = APIRouter(prefix="/v1/documents", tags=["documents"])


_READ_ERRORS = error_responses(401, 403)


@router.get("", response_model=DocumentPage, responses=_READ_ERRORS)
async def list_documents(offset: int = Query(0, ge=0, le=2**63 - 1, description="documents to skip"),
                         limit: int = Query(50, ge=1, le=1000, description="page size"),
                         *, store: StoreDep, access: ReadAccess) -> DocumentPage:
    """A page of the stored documents the key may read, ordered by source then id, with their count."""
    rows, total = await asyncio.to_thread(document_page, store, offset, limit, access)
    return DocumentPage(total=total, offset=offset, limit=limit, documents=[DocumentOut.from_row(r) for r in rows])


@router.get("/{doc_id:path}", response_model=DocumentDetail,
            responses=error_responses(401, 403, 404))
async def get_document(doc_id: Text, store: StoreDep, access: ReadAccess) -> DocumentDetail:
    """One document with its chunks (404 if unknown, or outside the key's scope)."""
    document = await asyncio.to_thread(readable_document, store, doc_id, access)
    if document is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, _not_found(doc_id))
    return DocumentDetail.from_document(document)


@router.delete("/{doc_id:path}", response_model=DeleteResponse,
               responses=error_responses(401, 403, 404))
async def delete_document(doc_id: Text, service: ServiceDep, access: DeleteAccess,
                          feedback: FeedbackDep) -> DeleteResponse:
    """Delete a document and all its chunks from both indexes (needs an API key with the
    ``delete`` right when keys are set; 404 for a document outside the key's read scope).

    Its bytes leave the store's files too, and so do the ratings of answers that showed it and
    the engine's answer history; an uploaded file it came from is removed (its other documents
    stay stored); a server-side file is left alone, and re-ingesting it brings it back.
    """
    info = await asyncio.to_thread(delete_stored_document, service.store, feedback, doc_id, access,
                                   uploads_dir=service.settings.uploads_dir, history=service.models.answer_history)
    if info is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, _not_found(doc_id))
    return DeleteResponse(deleted=doc_id, chunks=int(info.get("n_chunks") or 0))


def _not_found(doc_id: str) -> str:
    hint = " (send '#' as %23)" if "#" not in doc_id else ""
    return f"no document with id {doc_id!r}{hint}"
