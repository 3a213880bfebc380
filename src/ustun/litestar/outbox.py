"""Events, jobs and webhook endpoints written in a handler's unit of work (the `uow` dependency):
they commit with the handler's rows and the answer stored for its key, or not at all.

`account` is any string the app scopes tenants by (the plugin's `scope_of` of the request, say);
ustun keeps its own row for it, made on first use, as Django's and Flask's integrations do. The
statements are the pillars' plans, run on the unit of work's connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ustun.defaults import DEFAULT_MAX_PENDING_JOBS
from ustun.jobs.adapters import plans as job_plans
from ustun.jobs.queue import new_job, quota_exceeded
from ustun.jobs.records import Job
from ustun.keys import secret_box
from ustun.settings import Settings
from ustun.store import UnitOfWork
from ustun.store.accounts import account_id as named_account
from ustun.store.plans import run
from ustun.webhooks import endpoints
from ustun.webhooks.adapters import plans as webhook_plans
from ustun.webhooks.endpoint_body import endpoint_fields
from ustun.webhooks.endpoints import NewEndpoint
from ustun.webhooks.operations import checked_endpoint
from ustun.webhooks.sending import outbox
from ustun.webhooks.sending.quotas import check_endpoint_room


async def emit(uow: UnitOfWork, event_type: str, data: dict[str, Any], *, account: str) -> str:
    """Record the event `event_type` of `account` and queue its deliveries to the account's
    endpoints in `uow` (they are sent only if it commits); the event's id."""
    owner = await run(named_account(account), uow.conn)
    return await outbox.emit(uow, owner, event_type, data)


async def enqueue(
    uow: UnitOfWork,
    kind: str,
    payload: dict[str, Any] | None = None,
    *,
    account: str,
    max_pending: int | None = DEFAULT_MAX_PENDING_JOBS,
) -> Job:
    """Add a pending job of `kind` for `account` in `uow`; 429 `quota-exceeded` (a
    `ProblemError`) when the account has `max_pending` pending already (by default
    `USTUN_MAX_PENDING_JOBS`'s default, as Django's and Flask's `enqueue`; None: no cap)."""
    job = new_job(kind, payload, account_id=await run(named_account(account), uow.conn))
    if not await run(job_plans.enqueue(job, max_pending=max_pending), uow.conn):
        raise quota_exceeded(max_pending or 0)
    return job


async def register_endpoint(
    uow: UnitOfWork,
    settings: Settings,
    account: str,
    url: str,
    event_types: Sequence[str] = ("*",),
    **options: Any,
) -> NewEndpoint:
    """Register `url` for `account`'s events of `event_types` (exact types, `payment.*`, `*`)
    in `uow`; its id and its signing secret (`whsec_…`), shown this once.

    `options` are the service's endpoint fields (`description`, `rate_limit`, `max_in_flight`,
    `ordering`, `signature`, `payload`). Checked as the service checks an endpoint: a refused
    URL (private addresses only with `webhook_allow_private`), event type or option raises 422
    `validation-error` naming the field, an account at `max_endpoints` 429 `quota-exceeded`.
    The secret is sealed with the settings' secret key, which the worker that delivers must
    share. Call it before the handler's first write: the URL's host is looked up.
    """
    fields = endpoint_fields(url, event_types, options)
    values = await checked_endpoint(fields, allow_private=settings.webhook_allow_private)
    owner = await run(named_account(account), uow.conn)
    held = await run(webhook_plans.endpoints_held(owner), uow.conn)
    check_endpoint_room(held, settings.max_endpoints)
    endpoint_id, secret = await endpoints.create(uow, secret_box(settings), owner, **values)
    return NewEndpoint(endpoint_id, str(secret))
