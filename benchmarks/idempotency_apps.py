"""The apps `benchmarks/idempotency.py` serves: the service's `POST /v1/payments` behind each
idempotency layer (or none), chosen by `BENCH_VARIANT`.

    uvicorn benchmarks.idempotency_apps:app --factory
"""

from __future__ import annotations

import os

from fastapi import FastAPI
from idempotency_header_middleware import IdempotencyHeaderMiddleware
from idempotency_header_middleware.backends import MemoryBackend, RedisBackend
from redis.asyncio import Redis
from starlette.middleware import Middleware

from ustun.idempotency import IdempotencyMiddleware, RedisRecordStore
from ustun.service import create_app
from ustun.settings import Settings

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def _layer(variant: str, ours: Middleware) -> Middleware | None:
    """The middleware that replaces the service's own for `variant` (None: no layer at all)."""
    prefix = os.environ.get("BENCH_REDIS_PREFIX", "ustun-bench:")
    if variant == "off":
        return None
    if variant == "ustun":
        return ours
    if variant == "ustun-claim-first":
        return Middleware(ours.cls, *ours.args, **{**ours.kwargs, "claim_first": True})
    if variant == "ustun-redis":
        store = RedisRecordStore.from_url(REDIS_URL, prefix=prefix)
        kwargs = {k: v for k, v in ours.kwargs.items() if k not in ("store", "transactional")}
        return Middleware(IdempotencyMiddleware, store=store, **kwargs)
    if variant == "peer-memory":
        return Middleware(IdempotencyHeaderMiddleware, backend=MemoryBackend())
    if variant == "peer-redis":
        backend = RedisBackend(
            Redis.from_url(REDIS_URL),
            keys_key=f"{prefix}keys",
            response_key=f"{prefix}responses:",
        )
        return Middleware(IdempotencyHeaderMiddleware, backend=backend)
    raise ValueError(f"unknown BENCH_VARIANT {variant!r}")


def app() -> FastAPI:
    """The service app with its idempotency middleware swapped for the variant's."""
    application = create_app(Settings())
    stack = application.user_middleware
    (index,) = [i for i, m in enumerate(stack) if m.cls is IdempotencyMiddleware]
    layer = _layer(os.environ["BENCH_VARIANT"], stack[index])
    if layer is None:
        del stack[index]
    else:
        stack[index] = layer
    return application
