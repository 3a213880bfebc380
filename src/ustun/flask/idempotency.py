"""`@idempotent`: a Flask view run once per `Idempotency-Key`, what it writes through the
session (its rows, events and jobs) committed by ustun in one transaction with its stored answer
(`ustun.idempotency.hosted`).

The view does not commit. An answer below 500 commits; a raise or a 5xx rolls back and leaves
the key free; a storable 4xx rolls the view's writes back and is stored alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, ParamSpec, TypeVar

from flask.globals import current_app, request
from flask.helpers import make_response
from flask.wrappers import Request, Response
from werkzeug.utils import import_string

from ustun.flask.extension import Ustun, current
from ustun.flask.problems import problem_response
from ustun.http.idempotency_key import HEADER
from ustun.idempotency.decision import Refuse, key_of
from ustun.idempotency.hosted import HostedKeys, Replayed
from ustun.idempotency.middleware import REPLAY_HEADERS, REPLAYED_HEADER
from ustun.idempotency.records import StoredResponse
from ustun.keys import hosted_keys

Policy = Literal["required", "optional"]
P = ParamSpec("P")
R = TypeVar("R")
SCOPE = "USTUN_IDEMPOTENCY_SCOPE"
_KEYS = "ustun.idempotency"


def scope_of(req: Request) -> str:
    """`app.config["USTUN_IDEMPOTENCY_SCOPE"]`'s function of the request, else one scope."""
    path = current_app.config.get(SCOPE)
    return "" if not path else str(import_string(path)(req))


def _keys(ustun: Ustun) -> HostedKeys:
    """The app's idempotency keys on the session (made once per app)."""
    made: HostedKeys | None = current_app.extensions.get(_KEYS)
    if made is None:
        made = hosted_keys(ustun.settings(), connection=ustun.connection, atomic=ustun.atomic)
        current_app.extensions[_KEYS] = made
    return made


def _stored(response: Response) -> StoredResponse:
    """What a replay sends again of `response`: status, the replayed headers, the body (none of
    a streamed one)."""
    headers = tuple((n, v) for n, v in response.headers.items() if n.lower() in REPLAY_HEADERS)
    body = None if response.is_streamed else response.get_data()
    return StoredResponse(response.status_code, headers, body)


def _answer(answer: Replayed | Refuse) -> Response:
    if isinstance(answer, Refuse):
        return problem_response(answer.slug, answer.detail, answer.headers, answer.extensions)
    headers = [*answer.response.headers, (REPLAYED_HEADER.title(), "true")]
    return Response(answer.body, status=answer.response.status, headers=headers)


def _committed(ustun: Ustun, run: Callable[[], Response]) -> Response:
    """An unkeyed request: its writes committed when it answers below 500, else rolled back."""
    session = ustun.session
    try:
        response = run()
    except BaseException:
        session.rollback()
        raise
    if response.status_code >= 500:
        session.rollback()
    else:
        session.commit()
    return response


def _call(policy: Policy, view: Callable[[], Any]) -> Response:
    key = key_of(
        request.headers.getlist(HEADER),
        required=policy == "required",
        method=request.method,
        path=request.path,
    )
    if isinstance(key, Refuse):
        return _answer(key)
    ustun = current()

    def run() -> Response:
        response = make_response(view())
        ustun.session.flush()  # the view's ORM writes fail here, not at the commit
        return response

    if key is None:
        return _committed(ustun, run)
    hosted = _keys(ustun)
    keyed = hosted.request(
        scope_of(request),
        key,
        method=request.method,
        path=request.path,
        query=request.query_string,
        body=request.get_data(cache=True),
    )
    result = hosted.call(keyed, run, _stored)
    if isinstance(result, (Replayed, Refuse)):
        return _answer(result)
    return result


def idempotent(policy: Policy = "optional") -> Callable[[Callable[P, R]], Callable[P, Response]]:
    """Run the view once per `Idempotency-Key` (`"required"`: refuse a request without one),
    committing what it wrote through the session with its answer. Put it under the route:

        @app.post("/payments")
        @idempotent("required")
        def pay(): ...
    """

    def decorate(view: Callable[P, R]) -> Callable[P, Response]:
        @functools.wraps(view)
        def keyed(*args: P.args, **kwargs: P.kwargs) -> Response:
            # An async view runs as Flask runs one (`ensure_sync`), in the request's thread.
            return _call(policy, lambda: current_app.ensure_sync(view)(*args, **kwargs))

        return keyed

    return decorate
