"""ustun's settings in a Django project: `settings.USTUN`, keys named as the `USTUN_` settings
without the prefix, on the database of a `DATABASES` alias.

`SECRET_KEY` defaults to Django's own. Two keys are Django's only: `IDEMPOTENCY_SCOPE` (a
dotted path to `f(request) -> str`) and `DATABASE` (the alias ustun writes to; "default").
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import connections
from sqlalchemy.engine import URL

from ustun.settings import Settings

DJANGO_ONLY = frozenset({"IDEMPOTENCY_SCOPE", "DATABASE"})
DEFAULT_ALIAS = "default"


def options() -> dict[str, Any]:
    """`settings.USTUN`, or nothing."""
    return dict(getattr(django_settings, "USTUN", None) or {})


def alias() -> str:
    """The `DATABASES` alias ustun's tables are in."""
    return str(options().get("DATABASE", DEFAULT_ALIAS))


def vendor(using: str) -> str:
    """`sqlite` or `postgresql`: the databases ustun runs on."""
    name = connections[using].vendor
    if name not in ("sqlite", "postgresql"):
        raise ImproperlyConfigured(
            f"ustun runs on SQLite and PostgreSQL; DATABASES[{using!r}] is {name}"
        )
    return name


def database_url(using: str) -> str:
    """The URL of `using`'s database, as `USTUN_DATABASE_URL` would give it (its test
    database while tests run)."""
    conf = connections[using].settings_dict
    if vendor(using) == "sqlite":
        return f"sqlite:///{conf['NAME']}"
    return URL.create(
        "postgresql",
        username=conf.get("USER") or None,
        password=conf.get("PASSWORD") or None,
        host=conf.get("HOST") or None,
        port=int(conf["PORT"]) if conf.get("PORT") else None,
        database=conf.get("NAME") or None,
    ).render_as_string(hide_password=False)


@cache
def _settings(using: str) -> Settings:
    given = {k.lower(): v for k, v in options().items() if k not in DJANGO_ONLY}
    given.setdefault("secret_key", django_settings.SECRET_KEY)
    given["database_url"] = database_url(using)
    return Settings(**given)


def ustun_settings(using: str | None = None) -> Settings:
    """ustun's settings for the database `using` (by default ustun's alias)."""
    return _settings(using or alias())


def _forget(*, setting: str, **_: Any) -> None:
    if setting in ("USTUN", "DATABASES", "SECRET_KEY"):
        _settings.cache_clear()


setting_changed.connect(_forget)
