"""A tiny Litestar shop on ustun: payments made once per Idempotency-Key, each with its
`payment.created` webhook event; reports made by a job (202, followed over server-sent events);
documents changed only under `If-Match`; webhook endpoints registered per account (README.md
says how to run it).

Callers sign in with HTTP basic auth (ann or bob, the demo's users); each is an account of
its own, for its idempotency keys, its events, its jobs and its documents.
`python shop.py` creates the shop's tables (ustun's: `litestar --app shop:app ustun migrate`).
"""

from __future__ import annotations

import asyncio
import base64
import os
from dataclasses import dataclass
from typing import Any

from litestar import Litestar, Request, Response, get, patch, post
from litestar.di import Provide
from litestar.exceptions import NotAuthorizedException, ValidationException
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, insert, select
from starlette.types import Scope

from ustun import clock
from ustun.concurrency import Preconditions, compare_and_set, require_if_match, validators
from ustun.errors import NotFoundError
from ustun.litestar import UstunPlugin, accepted, emit, enqueue, register_endpoint, represent
from ustun.settings import Settings
from ustun.store import Database, UnitOfWork

USERS = {"ann": "ann-password", "bob": "bob-password"}

metadata = MetaData()
payments = Table(
    "shop_payment",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("owner", String(50), nullable=False),
    Column("amount", Integer, nullable=False),
    Column("currency", String(3), nullable=False),
)
documents = Table(
    "shop_document",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("owner", String(50), nullable=False),
    Column("title", String(200), nullable=False),
    Column("body", String(2000), nullable=False),
    # Its ETag; every change bumps it (`compare_and_set`).
    Column("version", Integer, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)


def account(scope: Scope) -> str:
    """The signed-in user (401 without one): the scope of its keys, the owner of its jobs."""
    header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
    scheme, _, encoded = header.partition(" ")
    try:
        user, _, password = base64.b64decode(encoded).decode().partition(":")
    except ValueError:
        user = password = ""
    if scheme.lower() != "basic" or USERS.get(user) != password or not password:
        raise NotAuthorizedException(headers={"WWW-Authenticate": 'Basic realm="shop"'})
    return user


def caller(request: Request[Any, Any, Any]) -> str:
    """`account` as a dependency (`who`)."""
    return account(request.scope)  # type: ignore[arg-type]


@dataclass
class PaymentIn:
    amount: int
    currency: str


@dataclass
class ReportIn:
    rows: int


@dataclass
class DocumentIn:
    title: str
    body: str = ""


@dataclass
class DocumentEdit:
    title: str | None = None
    body: str | None = None


@dataclass
class EndpointIn:
    url: str
    events: list[str] | None = None


def shown_payment(row: Any) -> dict[str, Any]:
    return {"id": row.id, "amount": row.amount, "currency": row.currency}


def shown_document(row: Any) -> dict[str, Any]:
    return {"id": row.id, "title": row.title, "body": row.body}


@post("/payments", opt={"idempotency": "required"})
async def pay(data: PaymentIn, uow: UnitOfWork, who: str) -> dict[str, Any]:
    """A payment and its `payment.created` event, committed with the answer kept for the key."""
    values = {"owner": who, "amount": data.amount, "currency": data.currency}
    row = (await uow.conn.execute(insert(payments).values(values).returning(payments))).one()
    await emit(uow, "payment.created", shown_payment(row), account=who)
    return shown_payment(row)


@get("/payments/{payment_id:int}")
async def payment(payment_id: int, uow: UnitOfWork, who: str) -> dict[str, Any]:
    found = await uow.conn.execute(
        select(payments).where(payments.c.id == payment_id, payments.c.owner == who)
    )
    row = found.first()
    if row is None:
        raise NotFoundError(f"No payment {payment_id}.")
    return shown_payment(row)


@post("/reports", opt={"idempotency": "required"})
async def report(
    data: ReportIn, uow: UnitOfWork, who: str, request: Request[Any, Any, Any]
) -> Response[Any]:
    """A CSV report made by a job: 202, its status resource in `Location`."""
    if not 1 <= data.rows <= 10_000:
        raise ValidationException("rows must be 1 to 10000")
    job = await enqueue(
        uow,
        "shop.report",
        {"rows": data.rows},
        account=who,
        max_pending=ustun.settings.max_pending_jobs,
    )
    return accepted(job, request)


@post("/documents", opt={"idempotency": "required"})
async def create_document(
    data: DocumentIn, uow: UnitOfWork, who: str, request: Request[Any, Any, Any]
) -> Response[Any]:
    values = {"owner": who, "title": data.title, "body": data.body, "version": 1}
    statement = insert(documents).values(**values, updated_at=clock.now()).returning(documents)
    row = (await uow.conn.execute(statement)).one()
    location = request.url_for("document", document_id=row.id)
    return represent(
        request,
        shown_document(row),
        validators(row),
        status_code=201,
        headers={"Location": location},
    )


def _document(document_id: int, who: str) -> list[Any]:
    return [documents.c.id == document_id, documents.c.owner == who]


@get("/documents/{document_id:int}", name="document")
async def document(
    document_id: int, uow: UnitOfWork, who: str, request: Request[Any, Any, Any]
) -> Response[Any]:
    """The document with its ETag; 304 when `If-None-Match` holds it."""
    row = (await uow.conn.execute(select(documents).where(*_document(document_id, who)))).first()
    if row is None:
        raise NotFoundError(f"No document {document_id}.")
    return represent(request, shown_document(row), validators(row))


@patch("/documents/{document_id:int}")
async def edit_document(
    document_id: int,
    data: DocumentEdit,
    uow: UnitOfWork,
    who: str,
    pre: Preconditions,
    request: Request[Any, Any, Any],
) -> Response[Any]:
    """Change the document only as the caller saw it: 428 without `If-Match`, 412 when stale;
    the check and the write are one UPDATE."""
    require_if_match(pre)
    changes = {k: v for k, v in (("title", data.title), ("body", data.body)) if v is not None}
    row = await compare_and_set(
        uow.conn,
        documents,
        where=_document(document_id, who),
        pre=pre,
        values={**changes, "updated_at": clock.now()},
        method="PATCH",
    )
    return represent(request, shown_document(row), validators(row))


@post("/webhook-endpoints", opt={"idempotency": "required"})
async def register(data: EndpointIn, uow: UnitOfWork, who: str) -> Response[Any]:
    """An endpoint for the signed-in account's events; its secret is shown this once."""
    made = await register_endpoint(uow, ustun.settings, who, data.url, data.events or ["*"])
    # no-store: the answer kept for a retry of this key is sealed, as the secret must be.
    body = {"id": made.id, "secret": made.secret}
    return Response(body, status_code=201, headers={"Cache-Control": "no-store"})


db = Database(os.environ["SHOP_DATABASE_URL"])
ustun = UstunPlugin(
    db,
    settings=Settings(
        secret_key=os.environ.get("SHOP_SECRET_KEY", "change-me-to-32-characters-or-more"),
        job_modules="reports",
        webhook_allow_private=os.environ.get("SHOP_ALLOW_PRIVATE", "0") == "1",
    ),
    scope_of=account,
)
handlers: list[Any] = [pay, payment, report, create_document, document, edit_document, register]
if os.environ.get("SHOP_FAULTS") and __name__ != "__main__":
    from faults import faults  # handlers that fail on purpose, for the tests

    handlers += faults
app = Litestar(
    handlers, plugins=[ustun], dependencies={"who": Provide(caller, sync_to_thread=False)}
)


async def create_tables() -> None:
    """The shop's own tables (ustun's: `litestar --app shop:app ustun migrate`)."""
    async with db.unit_of_work() as uow:
        await uow.conn.run_sync(metadata.create_all)
    await db.dispose()


if __name__ == "__main__":
    asyncio.run(create_tables())
