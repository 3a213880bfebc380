"""The `ustun` command: serve, worker, migrate, keys, listen."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, TypeVar

import typer
import uvicorn

from ustun import logs
from ustun.clock import rfc3339
from ustun.http.signature import Secret
from ustun.service import create_app
from ustun.service.accounts import (
    DEFAULT_ACCOUNT,
    KeyInfo,
    bootstrap,
    create_key,
    find_keys,
    list_keys,
    revoke_key,
)
from ustun.service.worker import Worker
from ustun.settings import Settings
from ustun.store import Database
from ustun.store.migrate import SchemaOutOfDate, check_current, upgrade
from ustun.webhooks.listen import app as listen_app
from ustun.webhooks.secretbox import SecretKeyError

T = TypeVar("T")

app = typer.Typer(
    help="ustun: idempotency keys, optimistic concurrency, async jobs and webhooks.",
    no_args_is_help=True,
    add_completion=False,
)
keys = typer.Typer(help="Manage API keys.", no_args_is_help=True)
app.add_typer(keys, name="keys")


def _settings(**overrides: object) -> Settings:
    settings = Settings()
    return settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def _setup_logging(settings: Settings) -> None:
    logs.configure(settings.log_level)


def _run(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `main` in a fresh event loop; an out-of-date schema exits 1 with what to do."""
    try:
        return _run_loop(main())
    except (SchemaOutOfDate, SecretKeyError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on uvloop (less CPU per I/O) when installed, as uvicorn does; else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


async def _prepare(db: Database, migrate: bool) -> None:
    """Migrate (or refuse an old schema), then make the first key on an empty database."""
    if migrate:
        await upgrade(db)
    else:
        await check_current(db)
    key = await bootstrap(db)
    if key is not None:
        typer.echo(
            f"Created account '{DEFAULT_ACCOUNT}'. Its API key, shown only this once:\n\n"
            f"    {key}\n\nSend it as `Authorization: Bearer <key>`.",
            err=True,
        )


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind [env USTUN_HOST].")] = None,
    port: Annotated[int | None, typer.Option(help="Port [env USTUN_PORT].")] = None,
    worker: Annotated[bool, typer.Option(help="Run the background worker in-process.")] = True,
    migrate: Annotated[bool, typer.Option(help="Migrate the database before serving.")] = True,
) -> None:
    """Migrate the database, then serve the API (with an embedded worker)."""
    settings = _settings(host=host, port=port)
    _setup_logging(settings)

    async def serve_forever() -> None:
        db = Database(settings.database_url)
        try:
            await _prepare(db, migrate)
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
            )
            await uvicorn.Server(config).serve()
        finally:
            await db.dispose()

    _run(serve_forever)


@app.command("worker")
def worker_command(
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs run at once.")] = 4,
) -> None:
    """Run background work (jobs, webhook dispatch, sweepers) until SIGTERM or SIGINT."""
    settings = _settings()
    _setup_logging(settings)

    async def work() -> None:
        db = Database(settings.database_url)
        try:
            await check_current(db)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            worker = Worker(db, settings, concurrency=concurrency)
            # Everything allocated so far (the imported service, some 190,000 objects) lives as
            # long as the process: keep the cyclic collector from re-scanning it on every pass.
            gc.freeze()
            await worker.run_until(stop)
        finally:
            await db.dispose()

    _run(work)


@app.command()
def migrate() -> None:
    """Bring the database schema up to date."""
    settings = _settings()

    async def migrate_db() -> None:
        db = Database(settings.database_url)
        try:
            await upgrade(db)
        finally:
            await db.dispose()

    _run(migrate_db)
    typer.echo("database schema is up to date", err=True)


@keys.command("create")
def keys_create(
    account: Annotated[str, typer.Option(help="Account name; created if new.")] = DEFAULT_ACCOUNT,
) -> None:
    """Create an API key and print it, alone, on stdout."""
    typer.echo(_run(lambda: _with_db(lambda db: create_key(db, account))))


async def _with_db(work: Callable[[Database], Coroutine[Any, Any, T]]) -> T:
    """Run `work` on the configured database, refusing an out-of-date schema."""
    db = Database(_settings().database_url)
    try:
        await check_current(db)
        return await work(db)
    finally:
        await db.dispose()


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


def _listen_secret(option: str | None, settings: Settings) -> str:
    """The signing secret from `--secret` (`-`: one line of standard input) or the environment."""
    if option == "-":
        text = sys.stdin.readline().strip()
    elif option:
        text = option
    else:
        text = settings.listen_secret.get_secret_value() if settings.listen_secret else ""
    if not text:
        raise typer.BadParameter(
            "no signing secret: set USTUN_LISTEN_SECRET, or pipe it in with --secret -",
            param_hint="--secret",
        )
    try:
        Secret.parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--secret") from None
    return text


@app.command()
def listen(
    secret: Annotated[
        str | None,
        typer.Option(
            help="The endpoint's signing secret (whsec_…), or `-` to read it from standard "
            "input. Default: USTUN_LISTEN_SECRET. A secret given here is visible in the process "
            "list to every user of the machine; prefer the environment or `-`.",
            show_default=False,
        ),
    ] = None,
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 9000,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
) -> None:
    """Receive webhooks locally: verify each one and print it."""
    settings = _settings()
    signing = _listen_secret(secret, settings)
    typer.echo(f"listening on http://{host}:{port}/ (any path); Ctrl-C to stop", err=True)
    receiver = listen_app(signing, tolerance=settings.signature_tolerance)
    uvicorn.run(receiver, host=host, port=port, log_level="warning")


def main() -> None:
    """Console-script entry point."""
    app()
