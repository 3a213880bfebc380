"""System checks (`manage.py check`): what ustun needs of the project's settings."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.db import connections

from ustun.django import conf
from ustun.settings import Settings

MIDDLEWARE = "ustun.django.IdempotencyMiddleware"
AUTHENTICATION = "django.contrib.auth.middleware.AuthenticationMiddleware"


@checks.register()
def ustun_checks(**_: Any) -> list[checks.CheckMessage]:
    found: list[checks.CheckMessage] = []
    middleware = list(getattr(settings, "MIDDLEWARE", []))
    if MIDDLEWARE not in middleware:
        found.append(
            checks.Error(
                f"{MIDDLEWARE} is not in MIDDLEWARE.",
                hint=f'Add "{MIDDLEWARE}" to MIDDLEWARE, after "{AUTHENTICATION}".',
                id="ustun.E001",
            )
        )
    elif AUTHENTICATION in middleware and middleware.index(AUTHENTICATION) > middleware.index(
        MIDDLEWARE
    ):
        found.append(
            checks.Error(
                f"{MIDDLEWARE} comes before {AUTHENTICATION}: idempotency keys are scoped by "
                "request.user, which is not set yet.",
                hint=f"Move it after {AUTHENTICATION}.",
                id="ustun.E002",
            )
        )
    alias = conf.alias()
    if alias not in connections:
        found.append(
            checks.Error(
                f'USTUN["DATABASE"] is {alias!r}, which is not in DATABASES.', id="ustun.E003"
            )
        )
        return found
    vendor = connections[alias].vendor
    if vendor not in ("sqlite", "postgresql"):
        found.append(
            checks.Error(
                f"ustun runs on SQLite and PostgreSQL; DATABASES[{alias!r}] is {vendor}.",
                id="ustun.E004",
            )
        )
    elif vendor == "sqlite":
        options = connections[alias].settings_dict.get("OPTIONS", {})
        if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
            found.append(
                checks.Warning(
                    f"DATABASES[{alias!r}] on SQLite opens its transactions DEFERRED: two "
                    "concurrent requests with the same Idempotency-Key can fail with 'database "
                    "is locked' instead of one waiting for the other.",
                    hint='Set DATABASES[...]["OPTIONS"]["transaction_mode"] = "IMMEDIATE" '
                    "(Django 5.1 or later).",
                    id="ustun.W001",
                )
            )
    known = set(Settings.model_fields) | {k.lower() for k in conf.DJANGO_ONLY}
    for key in conf.options():
        if key.lower() not in known or key.lower() == "database_url":
            found.append(
                checks.Warning(
                    f'USTUN["{key}"] is not a setting ustun reads.',
                    hint="Names are the USTUN_ settings without the prefix; the database is "
                    'DATABASES[USTUN["DATABASE"]].',
                    id="ustun.W002",
                )
            )
    return found
