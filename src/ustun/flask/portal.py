"""Consumer portal links for a Flask app's accounts, opened through the request's session.

    from ustun.flask import portal

    made = portal.link("acme", ttl=900)
    made.url  # "https://webhooks.example.com/portal/#token=ptl_…": hand it to that customer

The portal itself is served by `ustun serve` on the same database (its `/portal/` page and the
`/v1` webhook API); `base_url` is where that server is reached, by default
`USTUN_PUBLIC_URL`. See docs/portal.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from ustun import portal
from ustun.flask.extension import current
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
    session's transaction: it works once that commits (`@idempotent` commits it, or your
    `db.session.commit()`).

    `ttl`: seconds or a timedelta, 60 s to 7 days. `event_types`: the types of `catalog` (by
    default the active catalogue) its holder may subscribe to. A bad value raises
    `ProblemError` 422 `validation-error`, as `POST /v1/portal-sessions` answers.
    """
    ustun = current()
    url = base_url if base_url is not None else ustun.settings().public_base_url
    return portal.link_on(
        ustun.connection(),
        account,
        base_url=url,
        ttl=ttl,
        event_types=event_types,
        catalog=catalog,
    )
