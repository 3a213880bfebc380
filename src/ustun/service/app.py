"""The application factory of the reference service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from ustun import __version__, instrumentation
from ustun.idempotency import IdempotencyMiddleware, SqlRecordStore
from ustun.jobs import Registry
from ustun.jobs.watch import Watch
from ustun.keys import fingerprint_keys, secret_box
from ustun.service import consumer_portal, dashboard
from ustun.service.operations import (
    api_keys,
    health,
    job_routes,
    metrics,
    portal_sessions,
    queues,
    webhook_deliveries,
    webhook_endpoints,
    webhook_events,
)
from ustun.service.plumbing import problems
from ustun.service.plumbing.admission import Authenticator, KeyCache, RequestRate
from ustun.service.plumbing.auth_failures import FailureLimiter
from ustun.service.plumbing.hot import HotRoutes
from ustun.service.plumbing.in_flight import AccountSlots
from ustun.service.plumbing.metrics import Metrics
from ustun.service.plumbing.pipeline import Plumbing
from ustun.service.plumbing.response_headers import API_HEADERS
from ustun.service.resources import documents, ledger_accounts, payments, reports, transfers
from ustun.service.runtime.job_loops import job_kinds
from ustun.service.runtime.worker import Worker
from ustun.service.specs import api_docs, asyncapi, event_catalogue, event_types, openapi
from ustun.settings import Settings, reveal
from ustun.store import Database
from ustun.store.uow import Hook


def create_app(
    settings: Settings | None = None,
    *,
    db: Database | None = None,
    worker: bool = False,
    kinds: Registry | None = None,
    between_transfer_moves: Hook | None = None,
) -> FastAPI:
    """Build the service; with `worker=True` the background worker runs inside the app.

    `kinds`: the job kinds it enqueues and runs (by default the service's, `job_kinds`).
    `between_transfer_moves`: awaited inside a transfer's transaction between its debit and
    its credit (tests hold a transfer there to kill the process mid-write; None in production).
    """
    settings = settings or Settings()
    job_registry = kinds if kinds is not None else job_kinds(settings)
    database = db or Database(
        settings.database_url,
        statement_timeout=settings.statement_timeout,
        lock_timeout=settings.lock_timeout,
    )
    observed = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        unhook = instrumentation.add_hook(observed.on_event)
        background = Worker(database, settings, kinds=job_registry) if worker else None
        if background is not None:
            await background.start()
        try:
            yield
        finally:
            if background is not None:
                await background.stop()
            await app.state.job_watch.stop()
            await app.state.job_watch.reader.dispose()
            unhook()
            if db is None:
                await database.dispose()

    app = FastAPI(
        title="ustun",
        version=__version__,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.db = database
    app.state.settings = settings
    app.state.metrics = observed
    app.state.job_kinds = job_registry
    # Job event streams read on a database of their own (one connection): never the request pool.
    app.state.job_watch = Watch(
        Database(database.url, pool_size=1),
        max_streams=settings.max_streams,
        max_per_account=settings.max_streams_per_account,
    )
    app.state.between_transfer_moves = between_transfer_moves
    observed.queue_probes.append(queues.queue_probe(database))
    observed.job_probes.append(queues.job_probe(database))
    app.state.secret_box = secret_box(settings)
    fingerprint_key, previous_fingerprint_key = fingerprint_keys(settings)
    app.state.key_cache = KeyCache()
    app.state.auth_failures = FailureLimiter(
        settings.auth_failure_limit, settings.auth_failure_window
    )
    problems.install(app)
    app.state.event_types = event_types.CATALOGUE
    openapi.install(app, events=lambda: app.state.event_types)
    api_docs.install(app)
    app.include_router(health.router)
    app.include_router(payments.router)
    app.include_router(ledger_accounts.router)
    app.include_router(transfers.router)
    app.include_router(documents.router)
    app.include_router(metrics.router)
    app.include_router(asyncapi.router)
    dashboard.install(app, reveal(settings.secret_key))
    app.include_router(reports.router)
    app.include_router(job_routes.router)
    app.include_router(webhook_endpoints.router)
    app.include_router(webhook_events.router)
    app.include_router(event_catalogue.router)
    app.include_router(webhook_deliveries.router)
    app.include_router(api_keys.router)
    app.include_router(portal_sessions.router)
    consumer_portal.install(app)
    # The router's entry, inside FastAPI's exception handling: hot routes skip its routing pass.
    app.router.middleware_stack = HotRoutes(app.router.middleware_stack, app.router)
    # Inside the plumbing (added after it): keys are scoped by the authenticated account.
    app.add_middleware(
        IdempotencyMiddleware,
        store=SqlRecordStore(database, max_bytes=settings.idempotency_max_bytes or None),
        transactional=True,
        prefix="/v1/",
        lease=settings.idempotency_lease,
        ttl=settings.idempotency_ttl,
        # Responses that show a signing secret (no-store) are stored sealed under the same key.
        sealer=app.state.secret_box,
        # Stored fingerprints are keyed: a secret in a body cannot be confirmed from the table.
        fingerprint_key=fingerprint_key,
        previous_fingerprint_key=previous_fingerprint_key,
        # Its problems' `type`: <USTUN_PUBLIC_URL>/problems/<slug>, served by this app.
        problem_base=settings.public_base_url,
    )
    # Everything between the server and the app, in one pass: request id, server span,
    # observation, the body limit, URL guard, authentication, the request rate and requests in
    # flight, HEAD and Allow, a JSON body's media type, fixed headers (the API's cache policy,
    # the dashboard's and the portal's security headers), Date, and the answer to an outage.
    app.state.request_slots = (
        AccountSlots(settings.max_requests_in_flight) if settings.max_requests_in_flight else None
    )
    app.add_middleware(
        Plumbing,
        auth=Authenticator(database, cache=app.state.key_cache, failures=app.state.auth_failures),
        metrics=observed,
        openapi=app.openapi,
        router=app.router,
        refused=observed.refused,
        max_body=settings.max_body,
        rate=(
            RequestRate(rate=settings.rate_limit, burst=settings.rate_burst)
            if settings.rate_limit
            else None
        ),
        slots=app.state.request_slots,
        headers=(API_HEADERS, dashboard.HEADERS, consumer_portal.HEADERS),
    )
    # Outermost: the client's scheme and address as a trusted proxy saw them, for all the rest.
    if settings.proxies:
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.proxies)
    return app
