"""The `ustun` command: serve, worker, migrate, keys, rotate-key, listen, reconcile."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

try:
    import typer
except ModuleNotFoundError:  # `pip install ustun` gives the client only
    sys.stderr.write(
        "error: the ustun command needs an extra: pip install 'ustun[middleware]' (migrate, "
        "keys) or 'ustun[server]' (every command)\n"
    )
    sys.exit(2)

# Each command imports what it runs when it runs (`ustun --help` or `ustun keys create` need
# neither the web app nor the worker).
from ustun import logs, preflight
from ustun.clock import rfc3339
from ustun.defaults import DEFAULT_HOST
from ustun.errors import ClientError, ConfigError, TablesMissing
from ustun.service.plumbing.accounts import (
    DEFAULT_ACCOUNT,
    KeyInfo,
    bootstrap,
    create_key,
    find_keys,
    list_keys,
    revoke_key,
)
from ustun.settings import Settings, reveal, unknown_variables
from ustun.store import Database
from ustun.store.migrate import check_current, upgrade

if TYPE_CHECKING:
    from ustun.webhooks.receiving.handlers import Handlers

T = TypeVar("T")
log = logging.getLogger("ustun.cli")

app = typer.Typer(
    help="ustun: idempotency keys, optimistic concurrency, async jobs and webhooks.",
    no_args_is_help=True,
    add_completion=False,
)
keys = typer.Typer(help="Manage API keys.", no_args_is_help=True)
app.add_typer(keys, name="keys")


def _settings(**options: Any) -> Settings:
    """The settings, `options` (not None) over the environment; first, a warning for each
    variable that looks meant for ustun but is not read."""
    for warning in unknown_variables(os.environ):
        typer.echo(f"warning: {warning}", err=True)
    return preflight.load_settings(**options)


@contextmanager
def _server_extra(command: str) -> Iterator[None]:
    """Imports of the reference service: without them installed, one line saying what to do."""
    try:
        yield
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"ustun {command} needs the server extra ({exc.name} is not installed): "
            "pip install 'ustun[server]'"
        ) from None


def _setup_logging(settings: Settings) -> None:
    logs.configure(settings.log_level)


def _run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `main` in a new event loop: uvloop (less CPU per I/O) if installed, else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main())
    return uvloop.run(main())


@asynccontextmanager
async def _database(
    settings: Settings, *, migrate: bool = False, serving: bool = False
) -> AsyncIterator[Database]:
    """The database, checked: reachable and its schema current (or `migrate`d); `serving`
    (serve, worker): also the stored secrets open under the key. Only `migrate` creates a
    SQLite file, and only once every other check passed."""
    db = Database(
        settings.database_url,
        statement_timeout=settings.statement_timeout,
        lock_timeout=settings.lock_timeout,
    )
    try:
        preflight.database_file(settings.database_url, create=migrate)
        box = None
        if serving:
            from ustun.keys import secret_box

            box = secret_box(settings)  # may write the key file beside a SQLite database
        await preflight.reach(db)  # opens (so creates) a SQLite file
        await (upgrade if migrate else check_current)(db)
        if box is not None:
            from ustun.service.runtime import secret_keys

            await secret_keys.check(db, box, settings)
        yield db
    finally:
        await db.dispose()


async def _bootstrap(db: Database) -> None:
    """Make the first key on an empty database and show it, once."""
    key = await bootstrap(db)
    if key is not None:
        typer.echo(
            f"Created account '{DEFAULT_ACCOUNT}'. Its API key, shown only this once:\n\n"
            f"    {key}\n\nSend it as `Authorization: Bearer <key>`.",
            err=True,
        )


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind (env USTUN_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (env USTUN_PORT).")] = None,
    worker: Annotated[bool, typer.Option(help="Run the background worker in-process.")] = True,
    migrate: Annotated[bool, typer.Option(help="Migrate the database before serving.")] = True,
) -> None:
    """Migrate the database, then serve the API (with an embedded worker)."""
    with _server_extra("serve"):
        import uvicorn

        from ustun.service import create_app
        from ustun.service.runtime.job_loops import import_job_modules
        from ustun.service.runtime.server import ServerLimits, limited_protocol

    settings = _settings(host=host, port=port)
    _setup_logging(settings)
    listening = preflight.listen_socket(settings.host, settings.port)
    import_job_modules(settings)

    async def serve_forever() -> None:
        async with _database(settings, migrate=migrate, serving=True) as db:
            log.info("serving the database %s", preflight.shown_url(settings.database_url))
            await _bootstrap(db)
            config = uvicorn.Config(
                create_app(settings, db=db, worker=worker),
                host=settings.host,
                port=settings.port,
                log_level=settings.log_level.lower(),
                log_config=None,
                access_log=False,
                # The app believes X-Forwarded-* from USTUN_TRUSTED_PROXIES only (not 127.0.0.1).
                proxy_headers=False,
                lifespan="on",
                http=limited_protocol(ServerLimits.from_settings(settings)),
                ws="none",  # the service has no WebSocket routes
                timeout_keep_alive=settings.keep_alive_timeout,
            )
            # As in `worker`: what exists by now lives as long as the process; keep the cyclic
            # collector from re-scanning it on every full pass (which, beside hundreds of open
            # streams, held every request up for 0.1-1 s).
            gc.freeze()
            await uvicorn.Server(config).serve(sockets=[listening])

    _run(serve_forever)


@app.command("worker")
def worker_command(
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs run at once.")] = 4,
) -> None:
    """Run background work (jobs, webhook dispatch, sweepers) until SIGTERM or SIGINT."""
    run_worker(_settings(), concurrency)


def run_worker(settings: Settings, concurrency: int) -> None:
    """`ustun worker` on `settings` (also `manage.py ustun_worker`, on Django's database)."""
    with _server_extra("worker"):
        from ustun.service.runtime.job_loops import job_kinds
        from ustun.service.runtime.worker import Worker

    _setup_logging(settings)
    kinds = job_kinds(settings)  # imports the job modules

    async def work() -> None:
        async with _database(settings, serving=True) as db:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            worker = Worker(db, settings, concurrency=concurrency, kinds=kinds)
            # Everything allocated so far (the imported service, some 190,000 objects) lives as
            # long as the process: keep the cyclic collector from re-scanning it on every pass.
            gc.freeze()
            log.info(
                "worker started on the database %s: up to %d jobs at once (kinds %s), webhook "
                "delivery and the sweepers",
                preflight.shown_url(settings.database_url),
                concurrency,
                ", ".join(kinds.names()),
            )
            await worker.run_until(stop)
            log.info("worker stopped")

    _run(work)


@app.command()
def migrate() -> None:
    """Bring the database schema up to date."""
    settings = _settings()
    run_migrate(settings)
    typer.echo(
        f"database schema is up to date: {preflight.shown_url(settings.database_url)}", err=True
    )


def run_migrate(settings: Settings) -> None:
    """`ustun migrate` on `settings` (also `manage.py migrate`, on Django's database)."""

    async def migrate_db() -> None:
        async with _database(settings, migrate=True):
            pass

    _run(migrate_db)


@keys.command("create")
def keys_create(
    account: Annotated[str, typer.Option(help="Account name; created if new.")] = DEFAULT_ACCOUNT,
    operator: Annotated[
        bool,
        typer.Option(
            "--operator",
            help="An operator key: it may also open and revoke consumer portal sessions "
            "(POST /v1/portal-sessions) for any account. Keep it on the server's side.",
        ),
    ] = False,
) -> None:
    """Create an API key and print it, alone, on stdout."""
    typer.echo(_run(lambda: _with_db(lambda db: create_key(db, account, operator=operator))))


async def _with_db(work: Callable[[Database], Coroutine[Any, Any, T]]) -> T:
    """Run `work` on the configured database, checked: reachable and its schema current."""
    async with _database(_settings()) as db:
        return await work(db)


def _key_line(key: KeyInfo) -> str:
    """One key as `keys list` shows it: never the key itself, only its prefix."""
    never = "-"
    return "\t".join(
        (
            key.id,
            key.prefix,
            key.account.name,
            rfc3339(key.created_at),
            rfc3339(key.last_used_at) if key.last_used_at else never,
            rfc3339(key.revoked_at) if key.revoked_at else never,
        )
    )


@keys.command("list")
def keys_list(
    account: Annotated[str | None, typer.Option(help="Only this account's keys.")] = None,
) -> None:
    """List API keys, newest first: id, prefix, account, created, last used, revoked (TSV)."""
    found = _run(lambda: _with_db(lambda db: list_keys(db, account)))
    typer.echo("id\tprefix\taccount\tcreated\tlast_used\trevoked")
    for key in found:
        typer.echo(_key_line(key))


@keys.command("revoke")
def keys_revoke(
    key: Annotated[str, typer.Argument(help="The key's id (key_…) or prefix (ustun_sk_…).")],
) -> None:
    """Revoke an API key and end its dashboard sessions.

    Other running processes stop accepting it within a few seconds (their key cache).
    """

    async def revoke(db: Database) -> KeyInfo:
        matches = await find_keys(db, key)
        if not matches:
            typer.echo(f"error: no API key has the id or prefix {key!r}", err=True)
            raise typer.Exit(1)
        if len(matches) > 1:
            ids = ", ".join(m.id for m in matches)
            typer.echo(f"error: {len(matches)} keys have the prefix {key!r}: {ids}", err=True)
            typer.echo("revoke one of them by its id", err=True)
            raise typer.Exit(1)
        revoked = await revoke_key(db, matches[0].id)
        assert revoked is not None
        return revoked

    revoked = _run(lambda: _with_db(revoke))
    typer.echo(f"revoked {revoked.id} ({revoked.prefix}…, account {revoked.account.name})")


@app.command("rotate-key")
def rotate_key() -> None:
    """Re-encrypt every stored secret under USTUN_SECRET_KEY, opening what is still sealed
    under USTUN_SECRET_KEY_PREVIOUS; run it once every process has both keys."""
    with _server_extra("rotate-key"):
        from ustun.keys import secret_box
        from ustun.service.runtime import secret_keys

    settings = _settings()

    async def reseal() -> secret_keys.Resealed:
        async with _database(settings) as db:
            return await secret_keys.reseal(db, secret_box(settings), settings)

    done = _run(reseal)
    typer.echo(
        f"re-encrypted {done.endpoint_secrets} webhook endpoint(s) and {done.responses} stored "
        "response(s) under the current key; USTUN_SECRET_KEY_PREVIOUS may now be removed",
        err=True,
    )


def _secret_option(option: str | None, from_env: str | None) -> str:
    """A secret from its option (`-`: one line of standard input), else from the environment."""
    if option == "-":
        return sys.stdin.readline().strip()
    return option or from_env or ""


def _listen_secret(option: str | None, settings: Settings) -> str:
    """The signing secret or public key from `--secret` (`-`: one line of standard input) or the
    environment."""
    from ustun.http.signature import verifier

    text = _secret_option(option, reveal(settings.listen_secret))
    if not text:
        _refuse("no signing secret: set USTUN_LISTEN_SECRET, or pipe it in with --secret -")
    try:
        verifier(text)
    except ValueError as exc:
        _refuse(f"{'USTUN_LISTEN_SECRET' if option is None else '--secret'} is invalid: {exc}")
    return text


def _refuse(message: str) -> NoReturn:
    """Refuse an option's value as `main` refuses a `ConfigError`: one line, exit code 2 (so
    also where `app` runs without `main`, as under a test's CliRunner)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(preflight.EXIT_CONFIG)


@app.command()
def listen(
    secret: Annotated[
        str | None,
        typer.Option(
            help="The endpoint's signing secret (whsec_…) or, for an ed25519 endpoint, its "
            "public key (whpk_…); `-` reads it from standard input. Default: "
            "USTUN_LISTEN_SECRET. A secret given here is visible in the process list to every "
            "user of the machine; prefer the environment or `-`.",
            show_default=False,
        ),
    ] = None,
    port: Annotated[int, typer.Option(min=0, max=65_535, help="Port to listen on.")] = 9000,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = DEFAULT_HOST,
) -> None:
    """Receive webhooks locally: verify each one and print it."""
    with _server_extra("listen"):
        import uvicorn

        from ustun.webhooks.receiving.printer import app as listen_app

    settings = _settings()
    signing = _listen_secret(secret, settings)
    typer.echo(f"listening on http://{host}:{port}/ (any path); Ctrl-C to stop", err=True)
    receiver = listen_app(signing, tolerance=settings.signature_tolerance)
    uvicorn.run(receiver, host=host, port=port, log_level="warning")


def _printing() -> Handlers:
    """Handlers that print each event as one JSON line on stdout."""
    from ustun.webhooks.receiving.handlers import Handlers

    printing = Handlers()

    @printing.on("*")
    async def show(event: dict[str, Any]) -> None:
        typer.echo(json.dumps(event, ensure_ascii=False, separators=(",", ":")))

    return printing


def _since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"not an RFC 3339 time: {text!r} (e.g. 2026-12-01T00:00:00Z)", param_hint="--since"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@app.command()
def reconcile(
    url: Annotated[
        str, typer.Option(help="The provider's API base URL, e.g. https://api.example.com.")
    ],
    since: Annotated[
        str | None,
        typer.Option(
            help="Where the first run starts (RFC 3339); later runs resume from the cursor "
            "stored beside the inbox. Default: the beginning of the feed.",
            show_default=False,
        ),
    ] = None,
    handlers: Annotated[
        str | None,
        typer.Option(
            help="Your receiver's `Handlers` registry as `module:attribute`, to run each "
            "missed event through. Default: print each one as a JSON line.",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        float | None,
        typer.Option(min=0.1, help="Reconcile every N seconds until Ctrl-C (default: once)."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            help="The API key at the provider, or `-` to read it from standard input. "
            "Default: USTUN_RECONCILE_API_KEY (prefer it: the process list shows options).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Feed the events the receiver missed into its inbox and handlers (USTUN_DATABASE_URL is
    the receiver's database: the inbox, and the cursor stored beside it)."""
    from ustun.webhooks.receiving import handlers as webhook_handlers
    from ustun.webhooks.receiving.inbox import DatabaseInbox
    from ustun.webhooks.receiving.reconciler import Reconciler

    settings = _settings()
    _setup_logging(settings)
    key = _secret_option(api_key, reveal(settings.reconcile_api_key))
    if not key:
        raise typer.BadParameter(
            "no API key: set USTUN_RECONCILE_API_KEY, or pipe it in with --api-key -",
            param_hint="--api-key",
        )
    start = _since(since)
    try:
        registry = webhook_handlers.load(handlers) if handlers else _printing()
    except (ImportError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--handlers") from None

    async def run() -> int:
        db = Database(settings.database_url)
        try:
            reconciler = Reconciler(url, key, DatabaseInbox(db), registry, since=start)
            if every is None:
                return await reconciler.run_once()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await reconciler.run(stop, interval=every)
            return 0
        finally:
            await db.dispose()

    try:
        handled = _run(run)
    except (ClientError, TablesMissing) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if every is None:
        typer.echo(f"handled {handled} missed event(s)", err=True)


def main() -> None:
    """Console-script entry point: a refusal is one message, and exit code 2 for a mistake of
    configuration, 1 for a database schema that is out of date."""
    try:
        app()
    except preflight.REFUSALS as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(preflight.exit_code(exc))
