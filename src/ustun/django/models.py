"""`Versioned`: the abstract model whose `version` gives a strong ETag and fences every write
(`ustun.django.rest.ConditionalMixin`)."""

from __future__ import annotations

from django.db import models


class Versioned(models.Model):
    """A row with a version, raised by one on every conditional write."""

    version: "models.PositiveBigIntegerField[int, int]" = models.PositiveBigIntegerField(
        default=1, editable=False
    )

    class Meta:
        abstract = True
