"""Webhook endpoints of a Flask app's accounts, registered through the request's session.

    from ustun.flask import endpoints

    endpoint = endpoints.create("acme", "https://example.com/hooks", ["payment.*"])
    endpoint.secret  # "whsec_…": show it to its owner now, it is never shown again

The endpoint gets the account's events from `emit` (the same `account` string), delivered by
`flask ustun worker`. Its URL is checked as the service checks one (scheme, host, and the
addresses it resolves to: private ones only with `USTUN_WEBHOOK_ALLOW_PRIVATE`), and its
signing secret is sealed with `USTUN_SECRET_KEY` (by default the app's `SECRET_KEY`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ustun.flask.extension import current
from ustun.keys import secret_box
from ustun.webhooks.endpoint_body import endpoint_fields
from ustun.webhooks.endpoints import NewEndpoint, insert_on
from ustun.webhooks.operations import checked_endpoint


def create(
    account: str, url: str, event_types: Sequence[str] = ("*",), **options: Any
) -> NewEndpoint:
    """Register `url` for `account`'s events of `event_types` (exact types, `payment.*`, `*`)
    in the session's transaction: it exists once that commits (`@idempotent` commits it, or
    your `db.session.commit()`).

    `options` are the service's endpoint fields (`description`, `rate_limit`,
    `max_in_flight`, `ordering`, `signature`, `payload`), checked as the service checks
    `POST /v1/webhook-endpoints`'s body. A refused URL, event type or option (an unknown one,
    a wrong type) raises `ProblemError` 422 `validation-error` naming the field (`body.url`),
    an account at `USTUN_MAX_ENDPOINTS` 429 `quota-exceeded` (answered as problem+json).
    """
    ustun = current()
    settings = ustun.settings()
    fields = endpoint_fields(url, event_types, options)
    # Checked before any write: the URL's host is looked up.
    values = asyncio.run(checked_endpoint(fields, allow_private=settings.webhook_allow_private))
    box = secret_box(settings)
    return insert_on(ustun.connection(), box, account, values, max_endpoints=settings.max_endpoints)
