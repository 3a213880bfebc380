"""`Versioned`: the abstract model whose `version` gives a strong ETag and fences every write
(`ustun.django.rest.ConditionalMixin`)."""

from __future__ import annotations

from django.db import models

from ustun.concurrency.versions import Version
from ustun.http.etag import EntityTag


class Versioned(models.Model):
    """A row with a version, raised by one on every conditional write."""

    version: models.PositiveBigIntegerField[int, int] = models.PositiveBigIntegerField(
        default=1, editable=False
    )

    class Meta:
        abstract = True

    @property
    def etag(self) -> EntityTag:
        """The strong ETag of this version, formed as the service forms its rows' (`"3"`)."""
        return Version(self.version).etag


from ustun.django import admin_models  # noqa: E402, F401  (the admin's webhook tables)
