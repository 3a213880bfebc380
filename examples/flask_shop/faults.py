"""Views that fail on purpose, for the tests: routed only when `SHOP_FAULTS` names a folder.

`POST /faults/raise` writes a payment and its event, then raises; `POST /faults/5xx` writes
them, then answers 503. `POST /faults/wait` writes them, creates `<SHOP_FAULTS>/entered`, and
answers once `<SHOP_FAULTS>/release` exists (a test sends a duplicate, or kills the server, in
between).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from flask import request

from shop import Payment, account, app, db, shown
from ustun.flask import emit, idempotent


def _pay() -> dict[str, Any]:
    body = request.get_json()
    payment = Payment(owner=account(), amount=int(body["amount"]), currency=body["currency"])
    db.session.add(payment)
    db.session.flush()
    emit("payment.created", shown(payment), account=payment.owner)
    return shown(payment)


@app.post("/faults/raise")
@idempotent("required")
def fail() -> Any:
    _pay()
    raise RuntimeError("the view failed after writing")


@app.post("/faults/5xx")
@idempotent("required")
def unavailable() -> Any:
    return {"payment": _pay()}, 503


@app.post("/faults/wait")
@idempotent("required")
def wait() -> Any:
    paid = _pay()
    folder = Path(os.environ["SHOP_FAULTS"])
    (folder / "entered").touch()
    deadline = time.monotonic() + 30
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return paid, 201
