"""A WSGI app that is not Flask, under `ustun.wsgi.IdempotencyMiddleware` (plain mode: the app
commits on its own). `POST /orders` writes an order and answers 201 (after `hold` seconds, if
its body says so: a request still running when its duplicates arrive); `POST /orders/raise`
raises before writing; `POST /orders/fail` answers 503 without writing.

The orders are in `SHOP_DATABASE_URL`; the idempotency records in `WSGI_RECORDS_URL` (a Redis
URL, under the key prefix `WSGI_REDIS_PREFIX`), by default the same database; `WSGI_TTL` is
their lifetime in seconds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import Any

from boot import create_tables
from sqlalchemy import Column, Integer, MetaData, Table, create_engine, insert

from ustun.defaults import DEFAULT_IDEMPOTENCY_TTL, DEFAULT_REDIS_PREFIX
from ustun.wsgi import IdempotencyMiddleware

url = os.environ["SHOP_DATABASE_URL"]
engine = create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
orders = Table(
    "wsgi_order",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("amount", Integer, nullable=False),
)


create_tables(engine, orders.metadata)


def orders_app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if environ["REQUEST_METHOD"] != "POST" or not path.startswith("/orders"):
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]
    if path == "/orders/raise":
        raise RuntimeError("the app failed")
    if path == "/orders/fail":
        start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
        return [b"try later"]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    order = json.loads(environ["wsgi.input"].read(length))
    time.sleep(float(order.get("hold", 0)))
    amount = int(order["amount"])
    with engine.begin() as conn:
        order_id = conn.execute(insert(orders).values(amount=amount)).inserted_primary_key[0]
    body = json.dumps({"id": order_id, "amount": amount}).encode()
    # The imperative `write()` of PEP 3333 (the other answers are iterables).
    write = start_response("201 Created", [("Content-Type", "application/json")])
    write(body)
    return []


app = IdempotencyMiddleware(
    orders_app,
    os.environ.get("WSGI_RECORDS_URL", url),
    prefix="/orders",
    policy="required",
    store_server_errors=False,
    ttl=float(os.environ.get("WSGI_TTL", DEFAULT_IDEMPOTENCY_TTL)),
    redis_prefix=os.environ.get("WSGI_REDIS_PREFIX", DEFAULT_REDIS_PREFIX),
)
