"""Handlers that fail on purpose, for the tests: routed only when `SHOP_FAULTS` names a folder.

`POST /faults/raise` writes a payment and its event, then raises; `POST /faults/5xx` writes
them, then answers 503. `POST /faults/wait` writes them, creates `<SHOP_FAULTS>/entered`, and
answers once `<SHOP_FAULTS>/release` exists (a test sends a duplicate, or kills the server, in
between). `GET /faults/refused` takes a unit of work, and a dependency that refuses the caller
(401) once the unit of work is open.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from litestar import Response, get, post
from litestar.di import Provide
from litestar.exceptions import NotAuthorizedException

from shop import PaymentIn, pay
from ustun.store import UnitOfWork

KEYED = {"idempotency": "required"}


@post("/faults/raise", opt=KEYED)
async def fail(data: PaymentIn, uow: UnitOfWork, who: str) -> None:
    await pay.fn(data, uow, who)
    raise RuntimeError("the handler failed after writing")


@post("/faults/5xx", opt=KEYED)
async def unavailable(data: PaymentIn, uow: UnitOfWork, who: str) -> Response[Any]:
    return Response({"payment": await pay.fn(data, uow, who)}, status_code=503)


@post("/faults/wait", opt=KEYED)
async def wait(data: PaymentIn, uow: UnitOfWork, who: str) -> dict[str, Any]:
    paid: dict[str, Any] = await pay.fn(data, uow, who)
    folder = Path(os.environ["SHOP_FAULTS"])
    (folder / "entered").touch()
    deadline = time.monotonic() + 30
    while not (folder / "release").exists() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)  # a file another process makes: no event to wait on
    return paid


async def refuse_later() -> None:
    """Refuse the caller after a moment: the dependencies resolved beside it are open by then."""
    await asyncio.sleep(0.05)
    raise NotAuthorizedException()


@get("/faults/refused", dependencies={"refusal": Provide(refuse_later)})
async def refused(uow: UnitOfWork, refusal: None) -> None:
    raise AssertionError("never called: its dependency refuses")


faults = [fail, unavailable, wait, refused]
