from django.db import models

from ustun.django.models import Versioned


class Document(Versioned):
    """A document its owner edits under `If-Match`: every write is one compare-and-set."""

    owner = models.ForeignKey("auth.User", on_delete=models.CASCADE, related_name="documents")
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
