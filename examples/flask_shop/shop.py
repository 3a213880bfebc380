"""A tiny Flask shop on ustun: payments made once per Idempotency-Key, each with its
`payment.created` event, changed only under `If-Match`, and receipts made by a job (README.md
says how to run it).

Callers sign in with HTTP basic auth (ann or bob, the demo's users); each is an account of
its own, for its idempotency keys and its webhook events.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, abort, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ustun.flask import Ustun, accepted, conditional, emit, endpoints, enqueue, etag, idempotent

USERS = {"ann": "ann-password", "bob": "bob-password"}


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


class Payment(db.Model):  # type: ignore[name-defined,misc]
    """A payment; `version` makes its ETag and fences every change."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(50))
    amount: Mapped[int] = mapped_column(Integer)
    currency: Mapped[str] = mapped_column(String(3))
    note: Mapped[str] = mapped_column(String(200), default="")
    version: Mapped[int] = mapped_column(Integer, default=1)


def account(req: Any = None) -> str:
    """The signed-in user (401 without one): the scope of its keys, the account of its events."""
    auth = (req or request).authorization
    if auth is None or USERS.get(auth.username or "") != auth.password:
        abort(401)
    return str(auth.username)


app = Flask(__name__)
app.config.update(
    SQLALCHEMY_DATABASE_URI=os.environ["SHOP_DATABASE_URL"],
    SECRET_KEY=os.environ.get("SHOP_SECRET_KEY", "change-me-to-32-characters-or-more"),
    USTUN_IDEMPOTENCY_SCOPE="shop.account",
    USTUN_JOB_MODULES="receipts",
    USTUN_WEBHOOK_ALLOW_PRIVATE=os.environ.get("SHOP_ALLOW_PRIVATE", "0"),
)
if app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite"):
    # Concurrent requests queue for SQLite's write lock: wait for it up to 30 s.
    app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"connect_args": {"timeout": 30}}
db.init_app(app)
ustun = Ustun(app, db)


def shown(payment: Payment) -> dict[str, Any]:
    return {
        "id": payment.id,
        "amount": payment.amount,
        "currency": payment.currency,
        "note": payment.note,
    }


@app.get("/payments")
def payments() -> list[dict[str, Any]]:
    owned = db.session.scalars(db.select(Payment).filter_by(owner=account()).order_by(Payment.id))
    return [shown(p) for p in owned]


@app.post("/payments")
@idempotent("required")
def pay() -> tuple[dict[str, Any], int]:
    body = request.get_json()
    payment = Payment(owner=account(), amount=int(body["amount"]), currency=body["currency"])
    db.session.add(payment)
    db.session.flush()  # its id
    emit("payment.created", shown(payment), account=payment.owner)
    return shown(payment), 201


@app.route("/payments/<int:payment_id>", methods=["GET", "PATCH"])
@idempotent("optional")
def payment(payment_id: int) -> tuple[dict[str, Any], dict[str, str]]:
    where = (Payment.id == payment_id, Payment.owner == account())
    values = None if request.method == "GET" else {"note": request.get_json()["note"]}
    row = conditional(Payment, *where, values=values)
    return {"id": row.id, "amount": row.amount, "currency": row.currency, "note": row.note}, {
        "ETag": etag(row)
    }


@app.post("/payments/<int:payment_id>/receipts")
@idempotent("required")
def receipt(payment_id: int) -> Any:
    return accepted(enqueue("shop.receipt", {"payment": payment_id}, account=account()))


@app.post("/webhook-endpoints")
@idempotent("required")
def register() -> tuple[dict[str, Any], int, dict[str, str]]:
    """An endpoint for the signed-in account's events; its secret is shown this once. The
    body's other fields (`description`, `ordering`, …) are the endpoint's options: one ustun
    does not know, or of the wrong type, is answered 422 `validation-error`."""
    body = dict(request.get_json())
    made = endpoints.create(account(), body.pop("url", ""), body.pop("events", ["*"]), **body)
    # no-store: the answer kept for a retry of this key is sealed, as the secret must be.
    return {"id": made.id, "secret": made.secret}, 201, {"Cache-Control": "no-store"}


@app.cli.command("init-db")
def init_db() -> None:
    """Create the shop's own tables (ustun's: `flask --app shop ustun migrate`)."""
    db.create_all()


if os.environ.get("SHOP_FAULTS"):
    import faults  # noqa: F401  (routes views that fail on purpose, for the tests)
