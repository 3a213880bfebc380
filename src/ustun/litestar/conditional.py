"""A resource's representation with its validators, and the request's preconditions (the
plugin's `pre` dependency), for handlers that read and write through `ustun.concurrency`:

    @patch("/documents/{doc_id:int}")
    async def edit(doc_id: int, data: Edit, uow: UnitOfWork, pre: Preconditions,
                   request: Request) -> Response:
        require_if_match(pre)                                   # 428 without If-Match
        row = await compare_and_set(uow.conn, documents, where=[documents.c.id == doc_id],
                                    pre=pre, values={...})      # 412 when stale
        return represent(request, shown(row), validators(row))  # 200, its new ETag
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from litestar import Request, Response

from ustun.concurrency import conditional_read
from ustun.http.preconditions import Preconditions, Validators
from ustun.service.plumbing.conditional import validator_headers

_READS = frozenset({"GET", "HEAD"})


def preconditions(request: Request[Any, Any, Any]) -> Preconditions:
    """If-Match, If-None-Match, If-Modified-Since and If-Unmodified-Since, parsed (400
    `bad-request` for an If-Match nothing could match)."""
    return Preconditions.from_headers(request.headers.items())


def represent(
    request: Request[Any, Any, Any],
    content: Any,
    current: Validators,
    *,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response[Any]:
    """`content` with its validators (`ETag`, `Last-Modified`) and `headers`; on a GET or HEAD
    whose `If-None-Match` (or `If-Modified-Since`) holds them, 304 without a body (a false
    `If-Match` raises 412)."""
    sent = {**validator_headers(current), **(headers or {})}
    if request.method in _READS and conditional_read(
        request.method, preconditions(request), current
    ):
        return Response(None, status_code=304, headers=sent)
    return Response(content, status_code=status_code, headers=sent)
