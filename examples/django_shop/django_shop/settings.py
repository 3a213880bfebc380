"""Settings of the example shop: SQLite by default, PostgreSQL with `SHOP_DATABASE_URL`."""

import os
from pathlib import Path
from urllib.parse import urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "django-insecure-example-shop-secret-key-0123456789")
DEBUG = os.environ.get("SHOP_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "rest_framework",
    "ustun.django",
    "shop",
    "documents",
    "reports",
    "hooks",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "ustun.django.IdempotencyMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "django_shop.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "django_shop.wsgi.application"
ASGI_APPLICATION = "django_shop.asgi.application"


def _database(url: str) -> dict:
    # Every view in its own transaction, when asked: @idempotent's then nests in it.
    atomic = os.environ.get("SHOP_ATOMIC_REQUESTS", "") == "1"
    if url.startswith("postgresql"):
        parts = urlsplit(url)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": parts.username or "",
            "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "ATOMIC_REQUESTS": atomic,
        }
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": url.removeprefix("sqlite:///") if url else BASE_DIR / "shop.sqlite3",
        # Writers queue at BEGIN instead of failing with "database is locked" (Django >= 5.1).
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        "ATOMIC_REQUESTS": atomic,
    }


DATABASES = {"default": _database(os.environ.get("SHOP_DATABASE_URL", ""))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
STATIC_URL = "static/"

if os.environ.get("SHOP_FAST_PASSWORDS") == "1":
    # Tests only: every Basic-auth request checks the password, and Django's default hasher
    # spends most of a second of CPU on it.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
}
USTUN = {
    # Each module named holds the job kinds the worker runs (`kinds = Registry()`).
    "JOB_MODULES": "reports.jobs",
    # Webhooks to the local receiver of the tests and the README (never do this in production).
    "WEBHOOK_ALLOW_PRIVATE": os.environ.get("SHOP_ALLOW_PRIVATE", "") == "1",
}

# Errors (and ustun's worker) to stderr, whatever DEBUG says.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django": {"handlers": ["stderr"], "level": "ERROR"}},
}
