"""Settings of benchmarks/django.py's project, from the environment:

- `BENCH_DATABASE_URL`: `postgresql://user@host:port/name` or `sqlite:///path`;
- `BENCH_VARIANT`: `a`, `b`, `c` or `d`, the middleware of that variant only (`d` also for
  `manage.py migrate`, whose system checks want ustun's middleware);
- `BENCH_CACHE_MAX_ENTRIES`: django-idempotency-key's database cache's MAX_ENTRIES (Django's
  default 300 when unset).
"""

import os
from typing import Any
from urllib.parse import urlsplit

SECRET_KEY = "benchmark-django-secret-key-of-at-least-32-characters"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
VARIANT = os.environ.get("BENCH_VARIANT", "d")

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "rest_framework",
    "ustun.django",
    "payments",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    *{
        "c": ["idempotency_key.middleware.ExemptIdempotencyKeyMiddleware"],
        "d": ["ustun.django.IdempotencyMiddleware"],
    }.get(VARIANT, []),
]
ROOT_URLCONF = "bench_site.urls"
WSGI_APPLICATION = "bench_site.wsgi.application"


def _database(url: str) -> dict[str, Any]:
    if url.startswith("postgresql"):
        parts = urlsplit(url)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": parts.username or "",
            "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": None,  # one connection per gunicorn worker, kept
        }
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": url.removeprefix("sqlite:///"),
        "CONN_MAX_AGE": None,
        "OPTIONS": {
            # Writers queue at BEGIN instead of failing with "database is locked".
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }


DATABASES = {"default": _database(os.environ["BENCH_DATABASE_URL"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

# No authentication: every variant's cost is its idempotency layer, not a password hash.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
}

# (c): django-idempotency-key's CacheKeyStorage on Django's database cache (`manage.py
# createcachetable`), in the same database; its lock is its default ThreadLock, per process.
_CACHE_OPTIONS = {}
if os.environ.get("BENCH_CACHE_MAX_ENTRIES"):
    _CACHE_OPTIONS["MAX_ENTRIES"] = int(os.environ["BENCH_CACHE_MAX_ENTRIES"])
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "idempotency_key_cache",
        "TIMEOUT": 24 * 3600,
        "OPTIONS": _CACHE_OPTIONS,
    }
}
IDEMPOTENCY_KEY = {
    "STORAGE": {"CLASS": "idempotency_key.storage.CacheKeyStorage", "CACHE_NAME": "default"},
}

USTUN: dict[str, Any] = {}
