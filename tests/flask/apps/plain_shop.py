"""A Flask app on a plain SQLAlchemy 2 engine (no Flask-SQLAlchemy): `Ustun(app, engine=…)`,
views writing through `ustun.session`. `POST /payments` pays once per key, with its event;
`POST /async-payments` is the same view, async; `POST /raise` writes the same, then raises."""

from __future__ import annotations

import os
from typing import Any

from boot import create_tables
from flask import Flask, request
from sqlalchemy import Integer, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ustun.flask import Ustun, emit, idempotent


class Base(DeclarativeBase):
    pass


class PlainPayment(Base):
    __tablename__ = "plain_payment"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    amount: Mapped[int] = mapped_column(Integer)


url = os.environ["SHOP_DATABASE_URL"]
engine = create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
create_tables(engine, Base.metadata)
app = Flask(__name__)
app.config["SECRET_KEY"] = os.environ["SHOP_SECRET_KEY"]
ustun = Ustun(app, engine=engine)


def _pay() -> dict[str, Any]:
    payment = PlainPayment(amount=int(request.get_json()["amount"]))
    ustun.session.add(payment)
    ustun.session.flush()
    emit("payment.created", {"id": payment.id, "amount": payment.amount}, account="plain")
    return {"id": payment.id, "amount": payment.amount}


@app.post("/payments")
@idempotent("required")
def pay() -> Any:
    return _pay(), 201


@app.post("/async-payments")
@idempotent("required")
async def pay_async() -> Any:
    return _pay(), 201


@app.post("/raise")
@idempotent("required")
def fail() -> Any:
    _pay()
    raise RuntimeError("the view failed after writing")
