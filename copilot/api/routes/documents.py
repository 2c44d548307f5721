"""``GET /v1/documents`` (paged), ``GET`` and ``DELETE /v1/documents/{doc_id}``.

Document ids contain ``/`` and ``#`` (``tickets/jira_export.json#OPS-101``): the route
takes the rest of the path, so ``/`` may be sent as is, but ``#`` must be sent as ``%23``
(clients treat a raw ``#`` as the start of a fragment). Percent-encoding the whole id
(``%2F``, ``%23``) works too.

Reading needs an API key when keys are configured, unless ``public_reads``; deleting
always needs one then.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, HTTPException, Query, status

from copilot.api.dependencies import get_service, read_auth, require_api_key
from copilot.api.schemas import ChunkOut, DeleteResponse, DocumentDetail, DocumentOut, DocumentPage, ErrorResponse, Text
from copilot.service import CopilotService

router = APIRouter(prefix="/v1/documents", tags=["documents"])


_READ_ERRORS = {code: {"model": ErrorResponse} for code in (401, 403)}


@router.get("", response_model=DocumentPage, dependencies=[Depends(read_auth)], responses=_READ_ERRORS)
async def list_documents(offset: int = Query(0, ge=0, le=2**63 - 1, description="documents to skip"),
                         limit: int = Query(50, ge=1, le=1000, description="page size"),
                         service: CopilotService = Depends(get_service)) -> DocumentPage:
    """A page of stored documents, ordered by source then id, with the total count."""
    rows, total = await asyncio.to_thread(service.store.list_documents, offset, limit)
    return DocumentPage(total=total, offset=offset, limit=limit, documents=[DocumentOut.from_row(r) for r in rows])


@router.get("/{doc_id:path}", response_model=DocumentDetail, dependencies=[Depends(read_auth)],
            responses={**_READ_ERRORS, 404: {"model": ErrorResponse}})
async def get_document(doc_id: Text, service: CopilotService = Depends(get_service)) -> DocumentDetail:
    """One document with its chunks (404 if unknown)."""
    info = await asyncio.to_thread(service.store.get_document_info, doc_id)
    if info is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, _not_found(doc_id))
    chunks = await asyncio.to_thread(service.store.get_document_chunks, doc_id)
    base = DocumentOut.from_row(info)
    return DocumentDetail(**base.model_dump(), chunks=[ChunkOut(chunk_id=c.chunk_id, text=c.text) for c in chunks])


@router.delete("/{doc_id:path}", response_model=DeleteResponse, dependencies=[Depends(require_api_key)],
               responses={code: {"model": ErrorResponse} for code in (401, 403, 404)})
async def delete_document(doc_id: Text, service: CopilotService = Depends(get_service)) -> DeleteResponse:
    """Delete a document and all its chunks from both indexes (needs an API key when keys are set).

    Its source file's fingerprint is dropped, so re-ingesting that file brings it back.
    """
    info = await asyncio.to_thread(service.store.get_document_info, doc_id)
    if info is None or not await asyncio.to_thread(service.store.delete_document, doc_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, _not_found(doc_id))
    return DeleteResponse(deleted=doc_id, chunks=int(info.get("n_chunks") or 0))


def _not_found(doc_id: str) -> str:
    hint = " (send '#' as %23)" if "#" not in doc_id else ""
    return f"no document with id {doc_id!r}{hint}"
