"""The Django app `ustun.django`: its system checks, and ustun's schema brought up to date by
every `manage.py migrate`."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class UstunConfig(AppConfig):
    name = "ustun.django"
    label = "ustun"
    verbose_name = "ustun"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ustun.django import checks  # noqa: F401  (registers them)

        post_migrate.connect(_migrate_schema, sender=self)


def _migrate_schema(sender: AppConfig, using: str, **_: Any) -> None:
    """ustun's own tables, by the migrations `ustun migrate` runs, on the database migrated."""
    from ustun.cli import run_migrate
    from ustun.django.conf import ustun_settings

    run_migrate(ustun_settings(using))
