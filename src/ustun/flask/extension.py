"""`Ustun(app, db)`: ustun on a Flask app's SQLAlchemy session, its transaction and its database.

The session is Flask-SQLAlchemy's `db.session`, or with `Ustun(app, engine=…)` one session per
app context that ustun makes on the engine (`ustun.session`) and closes at its teardown.
Settings come from `app.config`, named as the `USTUN_` settings (`USTUN_SECRET_KEY`,
`USTUN_IDEMPOTENCY_TTL`, …); `USTUN_IDEMPOTENCY_SCOPE` (a dotted path to `f(request) -> str`)
is Flask's only. ustun's refusals (`ProblemError`) are answered as problem+json.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from flask.app import Flask
from flask.globals import app_ctx, current_app, request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from ustun import tracing
from ustun.errors import ProblemError
from ustun.flask.problems import response_of
from ustun.settings import Settings
from ustun.store.dbapi import DbapiConnection, begin_immediate, sqlalchemy_connection

if TYPE_CHECKING:
    from flask_sqlalchemy import SQLAlchemy

PREFIX = "USTUN_"
# Keys of `app.config` that are Flask's only, not `USTUN_` settings.
FLASK_ONLY = frozenset({"USTUN_IDEMPOTENCY_SCOPE"})
EXTENSION = "ustun"
SETTINGS = "ustun.settings"


class Ustun:
    """ustun on `app`, writing through `db.session` (Flask-SQLAlchemy) or a session of its own
    on `engine`, serving job status under `url_prefix`; `init_app` for an application factory."""

    def __init__(
        self,
        app: Flask | None = None,
        db: SQLAlchemy | None = None,
        *,
        engine: Engine | None = None,
        url_prefix: str = "/ustun",
    ) -> None:
        # With an engine, ustun's own sessions, one per app context, closed at its teardown.
        self._owned: scoped_session[Session] | None = None
        if db is not None and engine is None:
            self._sessions: Callable[[], Session] = db.session
            self._engine: Callable[[], Engine] = lambda: db.engine
        elif engine is not None and db is None:
            self._owned = scoped_session(sessionmaker(engine), scopefunc=_app_context_id)
            self._sessions = self._owned
            self._engine = lambda: engine
        else:
            raise TypeError("Ustun(app, db) or Ustun(app, engine=...): one of the two")
        self.url_prefix = url_prefix
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Register ustun on `app`: its problem answers, its `flask ustun` commands, job status
        at `url_prefix` and, with an engine, the session's teardown."""
        # Both import this module (`current`).
        from ustun.flask.cli import commands
        from ustun.flask.jobs import blueprint

        app.extensions[EXTENSION] = self
        app.register_error_handler(ProblemError, response_of)
        app.register_blueprint(blueprint, url_prefix=self.url_prefix)
        app.cli.add_command(commands)
        if self._owned is not None:
            app.teardown_appcontext(self._remove)
        if tracing.ENABLED:
            # Each request in its server span (or the app's own), named after its url rule.
            app.wsgi_app = functools.partial(tracing.wsgi, app.wsgi_app)  # type: ignore[method-assign]
            app.before_request(_route)

    @property
    def session(self) -> Session:
        """The app context's session: the one views write through."""
        return self._sessions()

    @property
    def engine(self) -> Engine:
        """The engine of the session's (default) database."""
        return self._engine()

    def settings(self) -> Settings:
        """ustun's settings for the current app (made once per app): `app.config`'s `USTUN_…`
        keys, on the engine's database; `SECRET_KEY` defaults to Flask's own."""
        cached: Settings | None = current_app.extensions.get(SETTINGS)
        if cached is None:
            config = current_app.config
            given: dict[str, Any] = {
                key.removeprefix(PREFIX).lower(): value
                for key, value in config.items()
                if key.startswith(PREFIX) and key not in FLASK_ONLY
            }
            if config.get("SECRET_KEY"):
                given.setdefault("secret_key", config["SECRET_KEY"])
            url = self.engine.url
            given["database_url"] = url.set(drivername=url.get_backend_name()).render_as_string(
                hide_password=False
            )
            cached = current_app.extensions[SETTINGS] = Settings(**given)
        return cached

    def connection(self) -> DbapiConnection:
        """The session's DB-API connection, in its transaction (begun if need be), with the
        session's pending ORM writes flushed to it first."""
        session = self.session
        session.flush()
        return sqlalchemy_connection(session.connection())

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """The session's transaction around the block: committed when it ends, rolled back
        when it raises. On SQLite it is begun IMMEDIATE, so that concurrent writers queue for
        the database's lock rather than fail on it."""
        session = self.session
        begin_immediate(sqlalchemy_connection(session.connection()))
        try:
            yield
            session.commit()
        except BaseException:
            session.rollback()
            raise

    def _remove(self, _: BaseException | None) -> None:
        if self._owned is not None:
            self._owned.remove()


def current() -> Ustun:
    """The `Ustun` of the current app."""
    found: Ustun | None = current_app.extensions.get(EXTENSION)
    if found is None:
        raise RuntimeError("ustun is not set up on this app: call Ustun(app, db)")
    return found


def _app_context_id() -> int:
    """One session per app context (as Flask-SQLAlchemy scopes its own)."""
    return id(app_ctx._get_current_object())  # type: ignore[attr-defined]


def _route() -> None:
    """Tell `tracing.wsgi` the request's url rule (`/payments/<int:id>`)."""
    if request.url_rule is not None:
        request.environ[tracing.ROUTE] = request.url_rule.rule
