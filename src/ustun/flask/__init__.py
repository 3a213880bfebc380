"""ustun for Flask: idempotency keys, events, jobs and conditional writes committed in the
request's own SQLAlchemy transaction (Flask-SQLAlchemy's `db.session`, or a SQLAlchemy 2
engine's session).

    ustun = Ustun(app, db)

    @app.post("/payments")
    @idempotent("required")
    def pay(): ...  # writes through db.session, emit(...), enqueue(...); does not commit

See docs/flask.md.
"""

from __future__ import annotations

from ustun.flask import endpoints
from ustun.flask.conditional import conditional, etag
from ustun.flask.extension import Ustun
from ustun.flask.idempotency import idempotent
from ustun.flask.outbox import accepted, emit, enqueue

__all__ = [
    "Ustun",
    "accepted",
    "conditional",
    "emit",
    "endpoints",
    "enqueue",
    "etag",
    "idempotent",
]
