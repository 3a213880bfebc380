"""Webhook endpoints of a Django project's accounts, registered on Django's connection.

    from ustun.django import endpoints

    endpoint = endpoints.create(str(user.pk), "https://example.com/hooks", ["payment.*"])
    endpoint.secret  # "whsec_…": show it to its owner now, it is never shown again

The endpoint gets the account's events from `emit` (the same `account` string), delivered by
`manage.py ustun_worker`. Its URL is checked as the service checks one (scheme, host, and the
addresses it resolves to: private ones only with `USTUN["WEBHOOK_ALLOW_PRIVATE"]`), and its
signing secret is sealed with `USTUN["SECRET_KEY"]` (by default Django's `SECRET_KEY`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asgiref.sync import async_to_sync
from django.db import transaction

from ustun.django.conf import alias, ustun_settings
from ustun.django.db import host_connection
from ustun.keys import secret_box
from ustun.webhooks.endpoint_body import endpoint_fields
from ustun.webhooks.endpoints import NewEndpoint, insert_on
from ustun.webhooks.operations import checked_endpoint


def create(
    account: str, url: str, event_types: Sequence[str] = ("*",), **options: Any
) -> NewEndpoint:
    """Register `url` for `account`'s events of `event_types` (exact types, `payment.*`, `*`),
    in the transaction open on ustun's database if any (it exists only if that commits).

    `options` are the service's endpoint fields (`description`, `rate_limit`,
    `max_in_flight`, `ordering`, `signature`, `payload`), checked as the service checks
    `POST /v1/webhook-endpoints`'s body. A refused URL, event type or option raises
    `ProblemError` 422 `validation-error`, an account at `USTUN["MAX_ENDPOINTS"]` 429
    `quota-exceeded` (the middleware answers either as problem+json).
    """
    settings = ustun_settings()
    fields = endpoint_fields(url, event_types, options)
    # Checked before the transaction: the URL's host is looked up.
    values = async_to_sync(checked_endpoint)(fields, allow_private=settings.webhook_allow_private)
    box = secret_box(settings)
    with transaction.atomic(using=alias()):
        return insert_on(
            host_connection(), box, account, values, max_endpoints=settings.max_endpoints
        )
