"""`UstunPlugin(database)`: ustun's idempotency keys in a Litestar app, on its own database.

    db = Database("postgresql://app@db/app")
    app = Litestar([create_payment], plugins=[UstunPlugin(db)])

    @post("/payments", opt={"idempotency": "required"})
    async def create_payment(data: Payment, uow: UnitOfWork) -> dict[str, object]:
        await uow.conn.execute(...)          # commits with the answer stored for the key

The plugin registers the ASGI `IdempotencyMiddleware` in transactional mode on a
`SqlRecordStore` of `database` (Litestar runs it after routing: a path that does not exist is
a 404 whatever its key), each handler's policy read from its `opt["idempotency"]`
(`"required"`, `"optional"`, `"off"`; unmarked POST/PATCH handlers get `default_policy`), the
unit of work as the dependency `uow` (it joins the middleware's transaction), the
`Idempotency-Key` header in the OpenAPI document of every handler with a policy, ustun's errors
(`UstunError`) and Litestar's `ValidationException` answered as problem+json, the record table
checked at startup and the database disposed at shutdown.

It also registers the request's parsed preconditions as the dependency `pre`, job status under
`path` (`ustun.litestar.jobs`: the caller's jobs, their events and results, the caller being
`scope_of`'s account), and the CLI's `litestar ustun migrate` and `litestar ustun worker` on
`settings` (by default `Settings()`, the `USTUN_` environment) with the plugin's database.
With a secret key in `settings`, the answers kept for keys are sealed when marked `no-store`
and their request fingerprints keyed, as in the service (unless `sealer`/`fingerprint_key`
are given).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any, cast

from click import Group
from litestar import Litestar, Request, Response
from litestar.config.app import AppConfig
from litestar.di import Provide
from litestar.enums import ParamType
from litestar.exceptions import ValidationException
from litestar.middleware import DefineMiddleware
from litestar.openapi.spec import OpenAPI, Operation, Parameter, Schema
from litestar.openapi.spec.enums import OpenAPIType
from litestar.plugins import CLIPluginProtocol, InitPluginProtocol
from litestar.routes import HTTPRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from ustun.errors import ProblemError, UstunError
from ustun.http.problem import MEDIA_TYPE, encode, problem
from ustun.idempotency.middleware import IdempotencyMiddleware, account_scope
from ustun.idempotency.policy import POLICIES, Policy
from ustun.idempotency.sql import SqlRecordStore
from ustun.jobs.watch import Watch
from ustun.keys import fingerprint_keys, secret_box
from ustun.litestar.cli import commands
from ustun.litestar.conditional import preconditions
from ustun.problems import problem_of
from ustun.settings import Settings
from ustun.store import Database, UnitOfWork

# The key of a route handler's `opt` that holds its policy.
OPT = "idempotency"
KEY_DESCRIPTION = (
    "A unique value (a UUIDv4 is ideal) reused unchanged on every retry of this operation, so "
    "that it takes effect at most once."
)


def handler_policy(scope: Scope) -> Policy | None:
    """The policy in the matched handler's `opt` (None: unmarked)."""
    handler = scope.get("route_handler")
    policy = None if handler is None else handler.opt.get(OPT)
    if policy is not None and policy not in POLICIES:
        raise ValueError(f"opt[{OPT!r}] must be one of {POLICIES}, not {policy!r}")
    return policy


# Where a request's ASGI scope keeps the units of work its `uow` dependency opened.
UNITS = "ustun.units"


class _Abandoned(Exception):
    """A unit of work Litestar left open: rolled back."""


def _units_closed(app: ASGIApp) -> ASGIApp:
    """`app` with the units of work a request leaves open rolled back once it returns.

    Litestar leaves a dependency's generator unclosed when another dependency resolved beside
    it raises (an authentication dependency's 401, say): its unit of work would hold its
    connection, and on SQLite its process's one writer, until garbage collection, and every
    write of the process after it would wait for them.
    """

    async def closing(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        opened: list[AsyncExitStack] = scope.setdefault(UNITS, [])
        try:
            await app(scope, receive, send)
        finally:
            for stack in opened:
                abandoned = _Abandoned("the request ended with its unit of work open")
                await stack.__aexit__(_Abandoned, abandoned, None)

    return closing


class UstunPlugin(InitPluginProtocol, CLIPluginProtocol):
    """ustun on `database`, with `settings` (default: `Settings()`, its database `database`),
    job status under `path` (None: not mounted); `options` are `IdempotencyMiddleware`'s
    (`scope_of`, `default_policy`, `prefix`, `sealer`, `fingerprint_key`, `problem_base`, …)."""

    def __init__(
        self,
        database: Database,
        *,
        settings: Settings | None = None,
        path: str | None = "/ustun",
        **options: Any,
    ) -> None:
        self.database = database
        self.settings = (settings or Settings()).model_copy(update={"database_url": database.dsn})
        self.path = path
        self.store = SqlRecordStore(database)
        if self.settings.secret_key is not None:
            current, previous = fingerprint_keys(self.settings)
            options.setdefault("sealer", secret_box(self.settings))
            options.setdefault("fingerprint_key", current)
            options.setdefault("previous_fingerprint_key", previous)
        self.options = options
        # Whose keys, and whose jobs: the caller's account.
        self.scope_of: Callable[[Scope], str] = options.get("scope_of", account_scope)
        self.problem_base: str = options.get("problem_base", "")
        self._watch: Watch | None = None

    @property
    def watch(self) -> Watch:
        """This process's reader of job events, feeding the open event streams."""
        if self._watch is None:
            raise RuntimeError("the app has not started: job event streams follow its lifespan")
        return self._watch

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.middleware.append(
            DefineMiddleware(
                # Starlette's ASGI types and Litestar's describe the same protocol.
                cast("Any", IdempotencyMiddleware),
                store=self.store,
                transactional=True,
                policy_of=handler_policy,
                **self.options,
            )
        )
        app_config.middleware.append(cast("Any", _units_closed))
        app_config.dependencies["uow"] = Provide(self._unit_of_work)
        app_config.dependencies["pre"] = Provide(preconditions, sync_to_thread=False)
        app_config.exception_handlers[UstunError] = self._problem
        app_config.exception_handlers[ValidationException] = self._problem
        if self.path is not None:
            from ustun.litestar.jobs import job_router  # it imports this module

            app_config.route_handlers.append(job_router(self, self.path))
        app_config.on_startup.append(self._started)
        app_config.on_shutdown.append(self._stopped)
        return app_config

    def on_cli_init(self, cli: Group) -> None:
        cli.add_command(commands)

    async def _unit_of_work(self, request: Request[Any, Any, Any]) -> AsyncIterator[UnitOfWork]:
        """The held unit of work of a request the middleware holds, else one of its own,
        committed when Litestar closes the dependency after the handler, rolled back when it
        throws the handler's exception in. Litestar resolves dependencies in tasks of their own
        and closes them in the request's: a unit of work of its own is not made ambient (its
        context variable could not be reset there). One that Litestar leaves open is closed by
        `_units_closed`."""
        stack = AsyncExitStack()
        cast("Scope", request.scope).setdefault(UNITS, []).append(stack)
        uow = await stack.enter_async_context(self.database.unit_of_work(ambient=False))
        try:
            yield uow
        except BaseException as exc:
            await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        await stack.aclose()

    async def _started(self, app: Litestar) -> None:
        """Check the record table (a missing one stops the app with its one line), document
        the `Idempotency-Key` header, and start following jobs for their event streams (on a
        database of their own: never the request pool)."""
        await self.store.prepare()
        if app.openapi_config is not None:
            documented(app.openapi_schema, app.routes)
        self._watch = Watch(
            Database(self.database.url, pool_size=1),
            max_streams=self.settings.max_streams,
            max_per_account=self.settings.max_streams_per_account,
        )

    async def _stopped(self) -> None:
        if self._watch is not None:
            await self._watch.stop()
            await self._watch.reader.dispose()
        await self.database.dispose()

    def _problem(self, request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
        """A `UstunError` as problem+json (`internal-error` for one without a problem type);
        Litestar's refusal of a body or parameter as 422 `validation-error`, its `errors`
        Litestar's `extra`."""
        if isinstance(exc, ValidationException):
            found = ProblemError("validation-error", exc.detail, errors=exc.extra or [])
        else:
            assert isinstance(exc, UstunError)
            found = problem_of(exc)
        document = problem(
            found.slug,
            found.detail,
            base=self.problem_base,
            status=found.status,
            instance=request.url.path,
            **found.extensions,
        )
        return Response(
            encode(document),
            status_code=document["status"],
            media_type=MEDIA_TYPE,
            headers=found.headers,
        )


def documented(openapi: OpenAPI, routes: list[Any]) -> None:
    """Add the `Idempotency-Key` header to the operation of each handler with a policy."""
    for route in routes:
        if not isinstance(route, HTTPRoute):
            continue
        item = (openapi.paths or {}).get(route.path_format or "/")
        for handler in route.route_handlers:
            policy = handler.opt.get(OPT)
            if item is None or policy in (None, "off"):
                continue
            for method in handler.http_methods:
                operation: Operation | None = getattr(item, method.lower(), None)
                if operation is not None:
                    operation.parameters = [*(operation.parameters or []), _header(policy)]


def _header(policy: str) -> Parameter:
    return Parameter(
        name="Idempotency-Key",
        param_in=ParamType.HEADER,
        required=policy == "required",
        description=KEY_DESCRIPTION,
        schema=Schema(type=OpenAPIType.STRING, min_length=1, max_length=255),
    )
