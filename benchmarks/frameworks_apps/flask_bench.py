"""benchmarks/frameworks.py's Flask app (Flask-SQLAlchemy, served by gunicorn): `POST
/<variant>/payments` writes the payment and its event in one transaction, in the variant
`BENCH_VARIANT` names, on the database at `BENCH_DATABASE_URL`:

(a) by hand, no idempotency: the payment and a row of the app's own outbox table, committed;
(b) (a) with ustun's own statements run by hand, as `@idempotent` runs them: the key's lock and
    read (`lock_key`), the payment, `emit`, the record (`settle_key`), in ustun's transaction
    (`Ustun.atomic`: IMMEDIATE on SQLite): the ceiling of ustun's SQL shape;
(c) ustun: `@idempotent("required")` and `emit`.
"""

from __future__ import annotations

import os
from typing import Any

from bench_tables import ACCOUNT, TTL, events, metadata, payments
from flask import Flask, Response, make_response, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase

from ustun.flask import Ustun, emit, idempotent
from ustun.http.fingerprint import fingerprint
from ustun.idempotency.records import StoredResponse
from ustun.idempotency.sql import lock_key, settle_key
from ustun.keys import fingerprint_keys
from ustun.store.plans import run_sync

VARIANT = os.environ["BENCH_VARIANT"]
URL = os.environ["BENCH_DATABASE_URL"]


class Base(DeclarativeBase):
    metadata = metadata


db = SQLAlchemy(model_class=Base)


class Payment(db.Model):  # type: ignore[name-defined,misc]
    __table__ = payments


class Event(db.Model):  # type: ignore[name-defined,misc]
    """The hand-written outbox row of (a); (b) and (c) `emit` ustun's."""

    __table__ = events


app = Flask(__name__)
app.config.update(
    SQLALCHEMY_DATABASE_URI=URL,
    SECRET_KEY="benchmark-flask-secret-key-of-at-least-32-characters",
)
if URL.startswith("sqlite"):
    # Writers queue for SQLite's write lock (up to 30 s) instead of failing on it.
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"connect_args": {"timeout": 30}}
db.init_app(app)
ustun = Ustun(app, db)


def _pay() -> dict[str, Any]:
    data = request.get_json()
    payment = Payment(amount=int(data["amount"]), currency=str(data["currency"]))
    db.session.add(payment)
    db.session.flush()
    return {"id": payment.id, "amount": payment.amount, "currency": payment.currency}


def plain() -> Any:
    data = _pay()
    db.session.add(Event(type="payment.created", data=data))
    db.session.commit()
    return data, 201


class _Rollback(Exception):
    pass


_KEYS: dict[str, Any] = {}


def _settings() -> tuple[bytes, int | None]:
    """The fingerprint key and the scopes' quota of ustun's settings, as `@idempotent` uses
    them (looked up once)."""
    if not _KEYS:
        settings = ustun.settings()
        _KEYS["fingerprint"] = fingerprint_keys(settings)[0]
        _KEYS["max_bytes"] = settings.idempotency_max_bytes or None
    return _KEYS["fingerprint"], _KEYS["max_bytes"]


def by_hand() -> Any:
    key = request.headers.get("Idempotency-Key")
    if not key:
        return {"detail": "Idempotency-Key required"}, 400
    fingerprint_key, max_bytes = _settings()
    body = request.get_data(cache=True)
    print_ = fingerprint("POST", request.path, request.query_string, body, key=fingerprint_key)
    try:
        with ustun.atomic():
            conn = ustun.connection()
            lookup = run_sync(lock_key("", key, max_bytes=max_bytes), conn)
            if lookup.record is not None or not lookup.held:
                raise _Rollback
            data = _pay()
            emit("payment.created", data, account=ACCOUNT)
            response: Response = make_response(data, 201)
            headers = (("Content-Type", response.content_type),)
            stored = StoredResponse(201, headers, response.get_data())
            if run_sync(settle_key("", key, print_, stored, ttl=TTL), conn) is not None:
                raise _Rollback
    except _Rollback:
        return {"detail": "replay or in progress"}, 409
    return response


@idempotent("required")
def with_ustun() -> Any:
    data = _pay()
    emit("payment.created", data, account=ACCOUNT)
    return data, 201


app.add_url_rule(
    f"/{VARIANT}/payments",
    "pay",
    {"a": plain, "b": by_hand, "c": with_ustun}[VARIANT],
    methods=["POST"],
)
