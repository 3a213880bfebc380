"""Views that fail on purpose, for the tests: routed only when `SHOP_FAULTS` names a folder.

`POST /faults/raise` writes a payment and its event, then raises; `POST /faults/5xx` writes
them, then answers 503. `POST /faults/wait` writes them, creates `<SHOP_FAULTS>/entered`, and
answers once `<SHOP_FAULTS>/release` exists (a test sends a duplicate, or kills the server, in
between). `POST /faults/job` starts a `shop.wait` job (a kind added to the shop's, `receipts`):
it reports 50 %, then finishes once `<SHOP_FAULTS>/<release>` exists, `release` named in the
body (a test follows its events meanwhile).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from flask import request

from receipts import kinds
from shop import Payment, account, app, db, shown
from ustun.flask import accepted, emit, enqueue, idempotent
from ustun.jobs import JobContext, Result

# How long a view or a job waits for its release at most.
WAIT = 30


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
    deadline = time.monotonic() + WAIT
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return paid, 201


@app.post("/faults/job")
@idempotent("required")
def job() -> Any:
    return accepted(
        enqueue("shop.wait", {"release": request.get_json()["release"]}, account=account())
    )


@kinds.kind("shop.wait")
async def waiting(ctx: JobContext) -> Result:
    """Half done at once, done when its release file exists (or after `WAIT` seconds)."""
    await ctx.progress(50)
    release = Path(os.environ["SHOP_FAULTS"]) / ctx.payload["release"]
    for _ in range(WAIT * 20):
        if release.exists():
            break
        await asyncio.sleep(0.05)
    return Result(b"released\n", "text/plain", "released.txt")
