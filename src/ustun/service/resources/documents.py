"""Documents: the optimistic-concurrency showcase (`/v1/documents`).

Every write is one compare-and-set: PUT, PATCH and DELETE need `If-Match`, and PUT with
`If-None-Match: *` creates at a client-chosen id. PATCH takes an RFC 7396 merge patch; since a
document's writable members are two required strings, a merge patch of it can only replace
them, so it is applied by the same single UPDATE (no read before the write).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, field_validator
from sqlalchemy import ColumnElement, Row, insert, select

from ustun import clock, ids
from ustun.clock import rfc3339
from ustun.concurrency import (
    compare_and_delete,
    compare_and_set,
    failed,
    insert_if_absent,
    new_generation,
    require_if_match,
    validators,
)
from ustun.errors import NotFoundError
from ustun.http.preconditions import IF_MATCH
from ustun.service.plumbing.accounts import Account
from ustun.service.plumbing.bodies import read_json
from ustun.service.plumbing.conditional import Conditions, conditional_get, representation
from ustun.service.plumbing.deps import DB, CurrentAccount
from ustun.service.plumbing.text import Text
from ustun.service.resources.schema import documents

router = APIRouter(prefix="/v1/documents", tags=["documents"])

MERGE_PATCH = "application/merge-patch+json"
DocumentId = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="1 to 64 of `[A-Za-z0-9_-]`.")
]


class DocumentIn(BaseModel):
    """A whole document as a client writes it (POST and PUT)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    title: Text
    body: Text = ""


class DocumentPatch(BaseModel):
    """An RFC 7396 merge patch of a document: members to replace; null would remove one."""

    model_config = ConfigDict(extra="forbid", strict=True)

    title: Text | None = None
    body: Text | None = None

    @field_validator("title", "body")
    @classmethod
    def _not_removed(cls, value: str | None) -> str:
        if value is None:
            raise ValueError("a document always has this member; a merge patch cannot remove it")
        return value


# What the OpenAPI document shows: the model's own schema would advertise `null`, which is refused.
PATCH_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
    "description": DocumentPatch.__doc__,
}


def render(row: Row[Any]) -> dict[str, Any]:
    """The public JSON shape of a document row."""
    return {
        "id": row.id,
        "object": "document",
        "title": row.title,
        "body": row.body,
        "version": row.version,
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def _key(account: Account, document_id: str) -> list[ColumnElement[bool]]:
    return [documents.c.account_id == account.id, documents.c.id == document_id]


def _created(row: Row[Any]) -> Response:
    return representation(
        render(row), validators(row), status=201, headers={"location": f"/v1/documents/{row.id}"}
    )


def _new_row(account: Account, document_id: str, document: DocumentIn) -> dict[str, Any]:
    now = clock.now()
    return {
        "account_id": account.id,
        "id": document_id,
        **document.model_dump(),
        "version": 1,
        "generation": new_generation(),
        "created_at": now,
        "updated_at": now,
    }


@router.post("", status_code=201, response_model=None)
async def create_document(document: DocumentIn, account: CurrentAccount, db: DB) -> Response:
    """Create a document with a server-chosen id (`doc_…`)."""
    async with db.unit_of_work() as uow:
        values = _new_row(account, ids.new_id("doc"), document)
        row = (
            await uow.conn.execute(insert(documents).values(values).returning(*documents.c))
        ).one()
    return _created(row)


@router.head("/{document_id}", response_model=None, operation_id="head_document")
@router.get("/{document_id}", response_model=None)
async def get_document(
    document_id: str, request: Request, pre: Conditions, account: CurrentAccount, db: DB
) -> Response:
    """One document with its ETag; 304 when If-None-Match matches (weak comparison)."""
    async with db.read() as conn:
        row = (await conn.execute(select(documents).where(*_key(account, document_id)))).first()
    if row is None:
        raise NotFoundError(f"No document {document_id!r} in this account.")
    return conditional_get(request, pre, validators(row), render(row))


@router.put("/{document_id}", response_model=None)
async def put_document(
    document_id: DocumentId,
    document: DocumentIn,
    pre: Conditions,
    account: CurrentAccount,
    db: DB,
) -> Response:
    """Replace a document (`If-Match`), or create it at this id (`If-None-Match: *`)."""
    require_if_match(pre, allow_create=True)
    async with db.unit_of_work() as uow:
        if pre.if_match is None:
            row = await insert_if_absent(
                uow.conn, documents, _new_row(account, document_id, document)
            )
            return _created(row)
        try:
            row = await compare_and_set(
                uow.conn,
                documents,
                where=_key(account, document_id),
                pre=pre,
                values={**document.model_dump(), "updated_at": clock.now()},
            )
        except NotFoundError:
            # Without preconditions this PUT would create the document, so they apply: an
            # If-Match on nothing is false (RFC 9110 §13.1.1, §13.2.1).
            raise failed(pre, IF_MATCH) from None
    return representation(render(row), validators(row))


# Its body (read by hand) is documented by `ustun.service.specs.openapi.ROUTE_NOTES`.
@router.patch("/{document_id}", response_model=None)
async def patch_document(
    document_id: str, request: Request, pre: Conditions, account: CurrentAccount, db: DB
) -> Response:
    """Apply an RFC 7396 merge patch under `If-Match`."""
    require_if_match(pre)
    patch = await read_json(request, DocumentPatch, (MERGE_PATCH,))
    async with db.unit_of_work() as uow:
        row = await compare_and_set(
            uow.conn,
            documents,
            where=_key(account, document_id),
            pre=pre,
            values={**patch.model_dump(exclude_unset=True), "updated_at": clock.now()},
            method="PATCH",
        )
    return representation(render(row), validators(row))


@router.delete("/{document_id}", status_code=204, response_model=None)
async def delete_document(
    document_id: str, pre: Conditions, account: CurrentAccount, db: DB
) -> Response:
    """Delete a document under `If-Match`; a tag of it never matches a later one at this id."""
    require_if_match(pre)
    async with db.unit_of_work() as uow:
        await compare_and_delete(uow.conn, documents, where=_key(account, document_id), pre=pre)
    return Response(status_code=204)
