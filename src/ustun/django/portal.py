"""Consumer portal links for a Django project's accounts, opened on Django's connection.

    from ustun.django import portal

    made = portal.link(str(request.user.pk), ttl=900)
    made.url  # "https://webhooks.example.com/portal/#token=ptl_…": hand it to that user

The portal itself is served by `ustun serve` on the same database (its `/portal/` page and the
`/v1` webhook API); `base_url` is where that server is reached, by default
`USTUN["PUBLIC_URL"]`. See docs/portal.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from django.db import transaction

from ustun import portal
from ustun.django.conf import alias, ustun_settings
from ustun.django.db import host_connection
from ustun.portal import DEFAULT_TTL, PortalLink
from ustun.webhooks.catalog import Catalog


def link(
    account: str,
    *,
    base_url: str | None = None,
    ttl: float | timedelta = DEFAULT_TTL,
    event_types: Sequence[str] | None = None,
    catalog: Catalog | None = None,
) -> PortalLink:
    """A portal link for `account` (the string `emit` scopes it by; made on first use), in the
    transaction open on ustun's database if any (it works once that commits).

    `ttl`: seconds or a timedelta, 60 s to 7 days. `event_types`: the types of `catalog` (by
    default the active catalogue) its holder may subscribe to. A bad value raises
    `ProblemError` 422 `validation-error`, as `POST /v1/portal-sessions` answers.
    """
    url = base_url if base_url is not None else ustun_settings().public_base_url
    with transaction.atomic(using=alias()):
        return portal.link_on(
            host_connection(),
            account,
            base_url=url,
            ttl=ttl,
            event_types=event_types,
            catalog=catalog,
        )
