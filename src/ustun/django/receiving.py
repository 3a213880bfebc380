"""`receiver(handlers, secret=…)`: a Django view that receives Standard Webhooks once each.

    from ustun.django import receiver

    def paid(event: dict) -> None:
        Order.objects.filter(ref=event["data"]["ref"]).update(paid=True)

    urlpatterns = [path("webhooks", receiver({"payment.*": paid}, secret="whsec_…"))]

A delivery whose signature checks out records its `webhook-id` in ustun's `webhook_inbox`
(UNIQUE) and runs the handler of its type in the same `transaction.atomic`, then answers `204`.
A duplicate id answers `200` without running anything. A handler that raises rolls back both,
so the id stays free and the sender's retry runs it again: `500` problem+json. A bad or missing
signature answers `401` (`400` for a repeated header), a body over 1 MiB `413`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ustun import clock
from ustun.defaults import DEFAULT_INBOX_LEASE
from ustun.django.conf import alias, ustun_settings
from ustun.django.db import host_connection
from ustun.django.problems import problem_response
from ustun.errors import SignatureError
from ustun.http.signature import Verifier, verifiers
from ustun.problems import problem_of
from ustun.store.plans import run_sync
from ustun.webhooks.adapters import plans
from ustun.webhooks.patterns import matches
from ustun.webhooks.receiving.receiver import MAX_BODY
from ustun.webhooks.receiving.verify import Delivery, verify_delivery

log = logging.getLogger("ustun.django.receiving")

Handler = Callable[[dict[str, Any]], object]
View = Callable[[HttpRequest], HttpResponse]


def handler_for(handlers: Mapping[str, Handler], event_type: str) -> Handler | None:
    """The handler of the first pattern (`payment.created`, `payment.*`, `*`) that selects
    `event_type`, or None."""
    for pattern, handler in handlers.items():
        if matches((pattern,), event_type):
            return handler
    return None


def receiver(
    handlers: Mapping[str, Handler],
    *,
    secret: Verifier | str | Iterable[Verifier | str],
    tolerance: float | None = None,
) -> View:
    """A view that verifies, records and handles webhooks signed with `secret` (the endpoint's
    `whsec_…` or `whpk_…`, or several while rotating; `ValueError` here if one is not).

    `handlers` maps event types to callables taking the event (a dict); an event no handler
    takes is recorded and acknowledged. `tolerance`: seconds a timestamp may be off (default
    `USTUN["SIGNATURE_TOLERANCE"]`).
    """
    secrets = verifiers(secret)

    @csrf_exempt
    def view(request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY:
            detail = f"Webhook bodies are limited to {MAX_BODY} bytes."
            return problem_response("payload-too-large", detail, request, [("connection", "close")])
        allowed = ustun_settings().signature_tolerance if tolerance is None else tolerance
        try:
            delivery = verify_delivery(secrets, request.headers, request.body, allowed)
        except SignatureError as exc:
            log.warning("refused a webhook: %s", exc)
            refused = problem_of(exc)
            return problem_response(refused.slug, refused.detail, request)
        try:
            handled = _handle(handlers, delivery)
        except Exception:
            log.exception("the handler of webhook %s failed; its retry runs it again", delivery.id)
            detail = "The webhook's handler failed; nothing was recorded, so a retry runs it again."
            return problem_response("internal-error", detail, request)
        if not handled:
            return JsonResponse({"duplicate": True}, status=200)
        return HttpResponse(status=204)

    return view


def _handle(handlers: Mapping[str, Handler], delivery: Delivery) -> bool:
    """Claim the delivery's id and run its handler in one transaction; False for a duplicate.

    An id this view records is committed handled or not at all; one an async `DatabaseInbox`
    sharing the table claimed and never finished is taken over after its lease."""
    event_type = str(delivery.event.get("type", ""))
    handler = handler_for(handlers, event_type)
    conn = host_connection()
    with transaction.atomic(using=alias()):
        now = clock.now()
        stale = now - timedelta(seconds=DEFAULT_INBOX_LEASE)
        if not run_sync(plans.claim_inbox(delivery.id, event_type, now=now, stale=stale), conn):
            return False
        if handler is not None:
            handler(delivery.event)
        run_sync(plans.inbox_done(delivery.id, clock.now()), conn)
    return True
